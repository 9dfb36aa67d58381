"""Small helpers with no acgan dependencies: atomic file writes, child processes, markdown tables."""
