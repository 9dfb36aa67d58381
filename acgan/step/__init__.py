"""The AC-GAN train step, behind one small interface that the training loop, sampling and the
benchmark use, so a second backend's step can sit beside the TensorFlow one (tf_step.ACGAN):

    step = ACGAN(models, num_classes, policy, jit=..., strategy=..., sync_bn=...)
    step.train_step(images, labels, z, fake_labels) -> {metric name: scalar tensor}
        one iteration: the D update, then G and Q from one forward pass
    step.generate(z, labels) -> images in [0, 1], inference mode
    step.noise_dim, step.step (the step counter), step.compile_mode, step.compile_reason
    step.skipped_steps(), step.loss_scales(), step.weights_fingerprint()

distribute.py holds the tf.distribute side: strategies, the cross-replica loss-scale guard, the XLA plan.
"""
