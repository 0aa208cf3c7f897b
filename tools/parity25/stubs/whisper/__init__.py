"""Stand-in for openai-whisper in the IndexTTS-2.5 reference environment: only `whisper.tokenizer` is used."""
