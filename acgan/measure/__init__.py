"""Measuring a machine: device description, timing and cost, prices, hardware advice, and the benchmark
(sweep of worker processes, tables, plots)."""
