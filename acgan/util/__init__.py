"""Small helpers that use nothing of acgan's but its errors: atomic file writes, a full disk, child
processes, markdown tables."""
