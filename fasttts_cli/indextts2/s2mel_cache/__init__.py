"""Training-free s2mel speed-up (issue 5): calibrated temporal and CFG-branch skipping of the DiT's
attention/FFN modules (DiTReducio-style), Euler step schedules, and the pieces that make skipping real.
(Random-weight DiTs for its tests and benchmarks: build.random_model.random_dit.)

    schedules        Euler time grids (uniform = the original's, sway)
    core             the one Euler CFM loop and its cached piecewise velocity, backend-neutral (no torch)
    policy           decision tables per level, the policy file, engine-identity checks (no torch)
    piecewise_torch  the loop over the PyTorch DiT's own pieces; diagonal-attention scores
    export_pieces    ONNX export of the pieces into an engine folder (`s2mel_pieces/`)
    piecewise_ort    the loop on ONNX Runtime; `CachedCFM`, the engine hook
    calibrate        the three-phase calibration (torch modules or ORT pieces; an engine folder's in
                     indextts2.calibrate_engine: this package never imports the engine)
"""
