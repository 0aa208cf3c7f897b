"""Engine tooling beside the product: benchmarks, GPU acceptance programs, fakes of GPU libraries."""
