"""The command line: Typer commands that parse flags and render results; no logic of their own."""

from fasttts_cli.cli.commands import app, main

__all__ = ["app", "main"]
