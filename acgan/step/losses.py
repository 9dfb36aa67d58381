"""The AC-GAN's losses, in backend-neutral Keras ops, shared by the TensorFlow and JAX steps.

D's real/fake loss comes in two forms (acgan.presets.ADVERSARIAL_LOSSES, chosen per preset or by --loss):
- nonsaturating: the AC-GAN paper's (and the original GAN's) binary cross-entropy on D's logits, G
  maximising log D(G(z)) rather than minimising log(1 - D(G(z))) (Goodfellow et al. 2014);
- hinge: D's hinge on its logits, G raising D's logit on its images (Lim and Ye 2017), the loss of the
  spectral-norm and projection discriminators (Miyato et al. 2018; Miyato and Koyama 2018).
"""

import keras


def bce(target, logits):
    """Mean binary cross-entropy of D's real/fake logits."""
    return keras.ops.mean(keras.losses.binary_crossentropy(target, logits, from_logits=True))


def ce(labels, logits):
    """Mean cross-entropy of Q's class logits against integer labels."""
    return keras.ops.mean(
        keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True)
    )


def d_adversarial(loss, d_real, d_fake):
    """D's loss on its logits for a real and a fake batch (float32 logits, D's float32 head)."""
    if loss == "hinge":
        return keras.ops.mean(keras.ops.relu(1.0 - d_real)) + keras.ops.mean(
            keras.ops.relu(1.0 + d_fake)
        )
    return bce(keras.ops.ones_like(d_real), d_real) + bce(keras.ops.zeros_like(d_fake), d_fake)


def g_adversarial(loss, d_fake):
    """G's loss on D's logits for its images."""
    if loss == "hinge":
        return -keras.ops.mean(d_fake)
    return bce(keras.ops.ones_like(d_fake), d_fake)
