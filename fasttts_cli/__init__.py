"""fasttts: batch dubbing from subtitles with a cloned voice."""

__version__ = "0.1.0"
