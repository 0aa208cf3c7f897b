"""Float32 audio: loading and resampling, tempo, the timeline and mix, loudness."""
