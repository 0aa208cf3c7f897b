"""Reading a settings file (a preset's TOML, a checkpoint's YAML or JSON) into Python data.

Each reader words its failures the same way: the file cannot be read (missing permission, not UTF-8)
or its syntax is wrong, both as an InputError (or the reader's subclass of it) naming the file.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from fasttts_cli.errors import InputError


def parse_text_file(
    path: Path,
    loads: Callable[[str], Any],
    syntax_errors: type[Exception] | tuple[type[Exception], ...],
    syntax: str,
    error: type[InputError] = InputError,
) -> Any:
    """`loads` of the file's UTF-8 text; `syntax` names the format in the message for `syntax_errors`."""
    try:
        return loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as e:
        raise error(path, f"cannot read: {e}") from None
    except syntax_errors as e:
        raise error(path, f"not valid {syntax}: {e}") from None
