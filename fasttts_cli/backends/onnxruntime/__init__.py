"""ONNX Runtime backend pieces (IO binding on CUDA)."""
