"""The AC-GAN's losses, in backend-neutral Keras ops, shared by the TensorFlow and JAX steps (the
steps call them as `losses.bce` / `losses.ce`, so a test can swap one for both)."""
import keras

from acgan.model.networks import takes_labels


def bce(target, logits):
    """Mean binary cross-entropy of D's real/fake logits."""
    return keras.ops.mean(keras.losses.binary_crossentropy(target, logits, from_logits=True))


def ce(labels, logits):
    """Mean cross-entropy of Q's class logits against integer labels."""
    return keras.ops.mean(keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True))


def mismatched_labels(labels, fake_labels, num_classes):
    """A wrong label for each real image, for D's mismatch term (common.MISMATCH_WEIGHT): (y + 1 + f mod
    (K - 1)) mod K, where f is G's label for the same slot of the batch, so never y and spread over the
    other K - 1 classes without a random state: both backends draw the same."""
    return keras.ops.mod(labels + 1 + keras.ops.mod(fake_labels, num_classes - 1), num_classes)


def checked_mismatch_weight(weight, d_head):
    """The mismatch term's weight as a float; the term needs a class-conditional D head."""
    weight = float(weight or 0.0)
    if weight and not takes_labels(d_head):
        raise ValueError("a mismatch term needs a class-conditional D head (acgan_cifar's projection)")
    return weight
