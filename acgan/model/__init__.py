"""The model: precision (dtype policy, loss-scaled optimizers), policy-aware blocks, the AC-GAN networks."""
