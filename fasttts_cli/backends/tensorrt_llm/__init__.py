"""TensorRT-LLM backend: the GPT worker (protocol, reference and engine sessions) and its build side."""
