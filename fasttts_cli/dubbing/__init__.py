"""The dubbing domain: script readers, the plan, timing, the line cache, the work folder."""
