"""acgan: train an AC-GAN under float32 / mixed_float16 / mixed_bfloat16 and report what it cost."""
