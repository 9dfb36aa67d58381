"""Measuring a machine, for training and the benchmark alike: device description and peak memory, timing
and cost, prices, FLOPs, profiles, hardware advice, backend labels."""
