"""The `torch` backend: IndexTTS-2 on PyTorch (CUDA when present) over the build-side modules.

No second model definition lives here: every function runs the weights of `fasttts_cli.build`'s modules
(UnifiedVoice, S2Mel, BigVGAN, w2v-BERT, codec, CAMPPlus). What this package adds is how they are run:

  static_cache   preallocated KV cache (rows x columns) and the SDPA trunk over UnifiedVoice's weights
  sampling_torch the original's logits processors on tensors (parity stage 3.6, the GPU bench)
  graphs         CUDA graph capture/replay per bucket (eager fallback on CPU, same interface)
  decode_torch   the GPT step protocol (the one generate loop drives it) and the latent pass
  s2mel_torch    batched CFG Euler CFM (DiT step graph per length bucket) and the batched vocoder
  engine_torch   the stage API (indextts2.stages) from a checkpoint directory; voice flow: indextts2.voice
  synthesizer    `TorchSynthesizer`, the Synthesizer protocol for the dubbing pipeline
  parity_torch   stage parity against the original's vectors (CPU tests and the GPU acceptance)
  random_model   full-size / tiny random-weight modules built in-process (bench, tests)
  (the GPU acceptance and bench: fasttts_cli/tools/accept_torch.py, tools/bench_torch.py)
"""
