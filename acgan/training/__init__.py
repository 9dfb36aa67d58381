"""Training runs: the loop, run folders, divergence checks, sample grids and the run report."""
