"""PyTorch definitions of IndexTTS-2's modules, weight-compatible with the checkpoint."""
