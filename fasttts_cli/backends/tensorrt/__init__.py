"""TensorRT backend: device memory, output allocation and the session pieces around a plan."""
