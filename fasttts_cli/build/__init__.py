"""Build side: weight-compatible PyTorch modules, checkpoint loading, export. Needs the `build` extra."""
