"""The benchmark (acgan.benchmark): a sweep of backend x policy x batch x XLA, each configuration timed in
a fresh worker process, and its tables, CSV and figures. Above training: its trainer-overhead worker
runs the full training loop."""
