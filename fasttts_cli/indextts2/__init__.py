"""IndexTTS-2 runtime on engine sessions (numpy + onnxruntime); never imports torch."""
