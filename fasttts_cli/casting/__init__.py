"""A cast from the original video: which spans of the source audio each speaker speaks alone (spans.py),
how clean each span is and the 3-12 s timbre reference built from the best of them (reference.py), the
cast.toml that records references and provenance (castfile.py), and building a whole cast (build.py)."""
