"""The AC-GAN train step, behind one small interface that the training loop, sampling and the
benchmark use, so a second backend's step sits beside the TensorFlow one:

    step = ACGAN(models, num_classes, policy, jit=..., strategy=..., sync_bn=...,   # tf_step
                 **common.step_options(arch))     # the preset's learning rates, beta_1, what Q and G learn
                                                  # from, the augmentation of D's inputs
    step = JaxACGAN(models, num_classes, policy, jit=..., mesh=None, **common.step_options(arch))   # jax_step:
                                                  # one device, or a jax.sharding.Mesh's "data" axis
    step.train_step(images, labels, z, fake_labels) -> StepMetrics
        one iteration: the D update, then G and Q from the same single G forward; the metrics are one
        vector in METRIC_NAMES order, left on the device until StepMetrics.read() copies it once
    step.generate(z, labels) -> images in [0, 1], inference mode
    step.noise_dim, step.step (the step counter), step.compile_mode, step.compile_reason,
    step.learning_rates (D, G, Q), step.q_learns_from_fakes, step.g_learns_from_q, step.augment
    step.skipped_steps(), step.loss_scales(), step.weights_fingerprint()
    step.set_learning_rate_scale(f): every optimizer's rate becomes its preset rate times f (the
        training loop's decay, common.learning_rate_scale); step.learning_rate_scale is the factor now

    step.sync_variables()   (JAX: the step's state written back into the Keras variables; TF: nothing)
    JaxACGAN also has state() / load_state(): every variable and the step counter as numpy arrays.

common.py holds what both backends share (names, learning rates, StepMetrics; no TensorFlow or JAX),
losses.py the losses and augment.py the augmentation of D's inputs (DiffAugment), in backend-neutral
Keras ops. distribute.py holds the tf.distribute side:
strategies, the cross-replica loss-scale guard, the XLA plan. The training loop picks the step through
its backend's runtime (training/tf_runtime.py, training/jax_runtime.py).
"""
