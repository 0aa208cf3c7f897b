"""Backends: how each stage runs (ONNX Runtime CPU/CUDA, TensorRT, TensorRT-LLM, PyTorch), one registry."""
