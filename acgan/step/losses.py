"""The AC-GAN's losses, in backend-neutral Keras ops, shared by the TensorFlow and JAX steps (the
steps call them as `losses.bce` / `losses.ce`, so a test can swap one for both)."""
import keras


def bce(target, logits):
    """Mean binary cross-entropy of D's real/fake logits."""
    return keras.ops.mean(keras.losses.binary_crossentropy(target, logits, from_logits=True))


def ce(labels, logits):
    """Mean cross-entropy of Q's class logits against integer labels."""
    return keras.ops.mean(keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True))
