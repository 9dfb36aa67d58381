"""What the training loop needs from TensorFlow: the tf.distribute strategy, the step (tf_step.TensorFlowStep),
the input stream (tf.data, split across the replicas) and the checkpoints (tf.train.Checkpoint).
jax_runtime.py gives the same on JAX; the loop sees only this interface."""

import functools
import json

import tensorflow as tf

from acgan.data.pipeline import training_batches
from acgan.step import distribute
from acgan.step.factory import build_step
from acgan.training import checkpoints as checkpoint_files
from acgan.training import tf_strategy
from acgan.training.stop_signals import agree


class TensorFlowCheckpoints:
    """ckpt-N.index/.data files through a tf.train.CheckpointManager, the timing history with them."""

    def __init__(self, trainer, directory, keep):
        self.trainer, self.directory, self.keep = trainer, directory, keep
        # The timing of every session so far (JSON list of session_record dicts), kept in the checkpoint.
        self.history = tf.Module(name="history")
        self.history.sessions_json = tf.Variable("[]", dtype=tf.string, trainable=False)
        self.checkpoint = tf.train.Checkpoint(
            gan=trainer, history=self.history, g_ema=trainer.ema_checkpointable
        )

    @functools.cached_property
    def manager(self):
        # Made after restore(): it reads the state file, which a restore may rewrite (damaged ones moved).
        return tf.train.CheckpointManager(self.checkpoint, self.directory, max_to_keep=self.keep)

    @property
    def latest_checkpoint(self):
        return self.manager.latest_checkpoint

    def restore(self, resume_from, move_damaged=True):
        """Restores the newest intact checkpoint in `resume_from` (checkpoints.restore_newest_intact);
        returns (its prefix or None, the timing history saved with it)."""
        latest = checkpoint_files.restore_newest_intact(self.checkpoint, resume_from, move_damaged)
        return latest, json.loads(self.history.sessions_json.numpy().decode())

    def save(self, step, sessions):
        self.history.sessions_json.assign(json.dumps(sessions))
        # a full disk: DiskFull, the previous checkpoint intact
        checkpoint_files.save(self.manager, step)

    def save_apart(self, prefix, sessions):
        """The same checkpoint at `prefix`, outside the state file and the rotation (the best one,
        best.py); returns its prefix."""
        self.history.sessions_json.assign(json.dumps(sessions))
        # Readers restore a save counter, which save() makes and write() does not: asking for it makes it
        # (the best checkpoint can come before the first save).
        _ = self.checkpoint.save_counter
        return self.checkpoint.write(str(prefix))


class TensorFlowRuntime:
    name = "tensorflow"

    def __init__(self, config):
        # before anything touches a device
        self.strategy = tf_strategy.make_strategy(config.strategy, config.devices)
        self.replicas = self.strategy.num_replicas_in_sync
        distribute.check_global_batch(config.batch, self.replicas)
        self.chief = tf_strategy.is_chief(self.strategy)
        self.notes = []

    def scope(self):
        return self.strategy.scope()

    def make_step(self, preset, models, num_classes, config):
        return build_step(
            preset,
            self.name,
            models,
            num_classes,
            jit=config.jit,
            strategy=self.strategy,
            sync_bn=config.sync_bn,
        )

    def layout(self, trainer):
        """What the report says about the replicas: the strategy, their count and devices, how XLA is used."""
        return {
            "strategy": distribute.strategy_name(self.strategy),
            "replicas": self.replicas,
            "workers": tf_strategy.worker_count(self.strategy),
            "replica_devices": distribute.replica_devices(self.strategy),
            "synchronized_batch_norm": trainer.synchronized_batch_norm,
            "xla": trainer.compile_mode,
            "xla_reason": trainer.compile_reason,
        }

    def resident(self, batch):
        """One global batch where the step reads it, each replica's slice on its device (the benchmark
        times the step on it)."""
        batch = tuple(tf.convert_to_tensor(t) for t in batch)
        if self.replicas > 1:
            dataset = tf.data.Dataset.from_tensors(batch)
            return next(iter(self.strategy.experimental_distribute_dataset(dataset)))
        return [tf.identity(t) for t in batch]  # onto the device

    @property
    def accelerated(self):
        return bool(tf.config.list_physical_devices("GPU"))

    checkpoints = TensorFlowCheckpoints  # (trainer, directory, keep)

    def batches(self, data, config, noise_dim, start_step):
        """The run's (images, labels, z, fake_labels) global batches, split across the replicas.

        Every worker builds the same global stream and keeps its replicas' slices (DATA sharding: the
        images are in memory, there are no files to shard), so each step's global batch, noise included,
        is exactly the one a single device would train on.
        """
        batches = training_batches(
            data, config.batch, config.seed, noise_dim, start_step=start_step
        )
        if self.replicas == 1 and distribute.strategy_name(self.strategy) == "default":
            gpus = tf.config.list_logical_devices("GPU")
            if gpus:  # the next batches wait on the device already (a distributed dataset does this itself)
                batches = batches.apply(
                    tf.data.experimental.prefetch_to_device(gpus[0].name, buffer_size=2)
                )
            return iter(batches)
        options = tf.data.Options()
        options.experimental_distribute.auto_shard_policy = (
            tf.data.experimental.AutoShardPolicy.DATA
        )
        return iter(self.strategy.experimental_distribute_dataset(batches.with_options(options)))

    def agree_on_stop(self, stop_signal, out_of_time):
        """All workers stop at the same step, or the others wait on a collective forever."""
        # Summed over every replica of every worker: only "more than zero" matters.
        return agree(
            stop_signal,
            out_of_time,
            tf_strategy.worker_count(self.strategy),
            lambda wishes: tf_strategy.sum_over_replicas(self.strategy, wishes) > 0,
        )

    def wait_for_all_workers(self):
        """A collective every worker joins: the chief stays up until the others are done with it
        (it leads the cluster's coordination service, and their heartbeats fail once it is gone)."""
        if distribute.strategy_name(self.strategy) == "multi_worker":
            tf_strategy.sum_over_replicas(self.strategy, [1.0])

    newest_checkpoint = staticmethod(checkpoint_files.newest_intact)

    def peers(self):
        """The other tasks of a multi_worker cluster, by name ("worker 1"); asked under multi_worker only."""
        resolver = self.strategy.cluster_resolver
        return [
            f"{job} {i}"
            for job, tasks in resolver.cluster_spec().as_dict().items()
            for i in range(len(tasks))
            if (job, i) != (resolver.task_type, resolver.task_id)
        ]
