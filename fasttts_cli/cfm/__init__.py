"""The one Euler CFM loop (cache policy hooks, T0 the plain case) and its time grids; no torch."""
