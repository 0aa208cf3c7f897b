"""API-faithful fakes of GPU libraries, for CI and --sim-cpu."""
