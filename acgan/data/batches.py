"""The trainer's batches as numpy defines them, for every backend: which images each step trains on
and G's noise for it, a pure function of (seed, step). TensorFlow feeds them through tf.data
(pipeline.py); JAX through `prefetched`, a host thread that keeps the next batches on the device.

No TensorFlow or JAX here. A resumed run, any number of replicas, and either backend see exactly the
same batches.
"""

import concurrent.futures
import functools

import numpy as np

from acgan.errors import UserError

# Separate random streams per purpose, so the data order and the noise never share draws.
_ORDER, _NOISE = 0, 1


def _generator(purpose, seed, index):
    return np.random.default_rng([purpose, seed % 2**64, index])


# Cached by value, not per plan (a cached method would keep its plans alive): a batch reads at most two
# epochs, and parallel readers of one run share them.
@functools.lru_cache(maxsize=4)
def _permutation(seed, epoch, n):
    return _generator(_ORDER, seed, epoch).permutation(n).astype(np.int32)


class BatchPlan:
    """Step -> indices into n items; with noise_dim and num_classes, G's inputs too (training_batch).

    The index stream is the concatenation of one permutation per epoch, a pure function of (seed,
    epoch), cut into consecutive batches; a batch may straddle two epochs, so none is ever dropped
    short. Resuming at any step costs one or two permutations, not a walk over the skipped items.
    """

    def __init__(self, n, batch, seed, noise_dim=None, num_classes=None):
        if batch < 1:
            raise UserError(f"batch size must be at least 1, got {batch}")
        if batch > n:
            raise UserError(
                f"batch size {batch} is larger than the dataset ({n} images); lower --batch or add images"
            )
        self.n, self.batch, self.seed = n, batch, seed
        self.noise_dim, self.num_classes = noise_dim, num_classes

    def indices(self, step):
        """int32 [batch]: the items step `step` (0-based) trains on."""
        start = step * self.batch
        epoch, offset = divmod(start, self.n)
        head = _permutation(self.seed, epoch, self.n)[offset : offset + self.batch]
        if len(head) == self.batch:
            return head
        return np.concatenate(
            [head, _permutation(self.seed, epoch + 1, self.n)[: self.batch - len(head)]]
        )


def sample_noise(seed, step, batch, noise_dim, num_classes):
    """One step's generator inputs: z uniform in [-1, 1) float32 [batch, noise_dim] and uniform int32
    labels [batch]; a pure function of (seed, step)."""
    rng = _generator(_NOISE, seed, step)
    z = rng.random((batch, noise_dim), dtype=np.float32) * 2.0 - 1.0
    return z, rng.integers(0, num_classes, batch, dtype=np.int32)


def training_batch(data, plan, step, rows=None):
    """(uint8 images [batch, H, W, C], int32 labels [batch], z, fake_labels) of step `step`, read from the
    ImageSet's own arrays (fancy indexing copies just the batch), each ordered by class. `rows` (a slice):
    only those rows of that batch, and only their images are read (one process's share of it)."""
    idx = plan.indices(step)
    z, fake_labels = sample_noise(plan.seed, step, plan.batch, plan.noise_dim, plan.num_classes)
    # Real and fake batches alike in class order, which changes no loss: D's minibatch-spread channel
    # (model/blocks.py) compares groups of consecutive images, which then mostly share a class.
    idx = idx[np.argsort(data.labels[idx], kind="stable")]
    fake_labels = np.sort(fake_labels)
    if rows is not None:
        idx, z, fake_labels = idx[rows], z[rows], fake_labels[rows]
    return data.images[idx], data.labels[idx], z, fake_labels


def prefetched(data, plan, start_step, put, depth=2, rows=None):
    """Endless training batches from `start_step` on (only `rows` of each: training_batch), made by a host
    thread `depth` steps ahead and handed to `put` (e.g. jax.device_put) there, so the copy to the device
    overlaps the running step."""
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="acgan-batches")

    def make(step):
        return put(training_batch(data, plan, step, rows))

    try:
        ahead = [pool.submit(make, step) for step in range(start_step, start_step + depth)]
        step = start_step + depth
        while True:
            batch = ahead.pop(0).result()
            ahead.append(pool.submit(make, step))
            step += 1
            yield batch
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
