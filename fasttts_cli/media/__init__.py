"""Media files through ffmpeg: probe, integrity, mux."""
