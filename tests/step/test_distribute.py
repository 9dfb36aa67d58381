"""tf.distribute on two logical CPU devices: the same update as one device, loss scaling that agrees
across replicas, two workers on localhost, and the clear errors."""
import dataclasses
import json
import os
import signal
import socket
import subprocess
import sys
import time

import keras
import numpy as np
import pytest
import tensorflow as tf
from conftest import CPU_REPLICAS, POLICIES

from acgan import presets
from acgan.data.batches import sample_noise
from acgan.model.networks import build_models
from acgan.step import distribute, tf_step

DEVICES = [f"/cpu:{i}" for i in range(CPU_REPLICAS)]
BATCH = 16
MIN_COSINE_TO_ONE_DEVICE = {"mixed_float16": 0.85, "mixed_bfloat16": 0.75}  # measured: see its test


@pytest.fixture(scope="module")
def mirrored():
    """One MirroredStrategy for the whole module: a second one over the same devices in one process
    reuses collective instance keys and fails with "Shape mismatch in the collective instance"."""
    return distribute.make_strategy("mirrored", DEVICES)


# With an average of G (G-EMA), so its update in cross-replica context is checked against one device's.
PRESET = dataclasses.replace(presets.REFERENCE, ema_decay=0.9)


def _trainer(strategy, jit=False, sync_bn=True):
    keras.utils.set_random_seed(3)
    with strategy.scope():
        models = build_models((28, 28, 1), 10, width=0.25)
    return tf_step.TensorFlowStep(models, 10, PRESET, jit=jit, strategy=strategy, sync_bn=sync_bn)


def _global_batch(step=0):
    rng = np.random.default_rng(step)
    images = tf.constant(rng.integers(0, 256, (BATCH, 28, 28, 1), dtype=np.uint8))
    labels = tf.constant(rng.integers(0, 10, BATCH, dtype=np.int32))
    return (images, labels) + sample_noise(7, step, BATCH, 62, 10)


def _distributed(trainer, batch):
    """The global batch split across the replicas, the way the trainer feeds it."""
    return next(iter(trainer.strategy.experimental_distribute_dataset(tf.data.Dataset.from_tensors(batch))))


def _weights(trainer):
    return [v.numpy() for model in trainer.models for v in model.variables]


def _per_replica(trainer, variable):
    return [np.asarray(v) for v in trainer.strategy.experimental_local_results(variable.value)]


def _assert_replicas_equal_and_finite(trainer, trainable_only=False):
    for model in trainer.models:
        for variable in model.trainable_variables if trainable_only else model.variables:
            copies = _per_replica(trainer, variable)
            assert len(copies) == CPU_REPLICAS
            assert np.isfinite(copies[0]).all(), variable.path
            for copy in copies[1:]:
                np.testing.assert_array_equal(copies[0], copy, err_msg=variable.path)
    for average in trainer.ema_checkpointable.weights:  # G's average: one value on every replica
        copies = [np.asarray(v) for v in trainer.strategy.experimental_local_results(average)]
        assert len(copies) == CPU_REPLICAS and np.isfinite(copies[0]).all()
        for copy in copies[1:]:
            np.testing.assert_array_equal(copies[0], copy)


def _pin_loss_scales(*trainers):
    """A modest scale: the initial 2^15 overflows on the first steps, where a replica's half batch and
    the whole batch need not agree."""
    for trainer in trainers:
        for optimizer in (trainer.d_optimizer, trainer.g_optimizer, trainer.q_optimizer):
            if tf_step.precision.is_loss_scaled(optimizer):
                optimizer.dynamic_scale.assign(256.0)


def _first_moments(trainer, name):
    """Adam's first moment after one step, (1 - beta_1) * gradient: the update's direction and size."""
    optimizer = getattr(trainer, f"{name}_optimizer")
    return np.concatenate([v.numpy().ravel() for v in optimizer.variables if "momentum" in v.path])


def _relative_difference(a, b):
    return float(np.linalg.norm(a - b) / np.linalg.norm(a))


@pytest.mark.parametrize("policy", POLICIES)
def test_two_replicas_match_one_device(policy, mirrored, set_policy):
    set_policy(policy)
    single = _trainer(tf.distribute.get_strategy())
    distributed = _trainer(mirrored)
    assert distributed.replicas == CPU_REPLICAS and distributed.synchronized_batch_norm
    for a, b in zip(_weights(single), _weights(distributed)):
        np.testing.assert_array_equal(a, b)
    _pin_loss_scales(single, distributed)

    batch = _global_batch()
    g_start = [v.numpy() for v in distributed.g_variables]
    expected = single.train_step(*batch)
    got = distributed.train_step(*_distributed(distributed, batch))
    # Under a mixed policy the two paths round differently (synchronized BN, the all-reduce). Measured,
    # seeds 0-7 (weights and batch), width 0.25, batch 16: losses differ by up to 0.25% (g_loss under
    # mixed_bfloat16; 0.21% under mixed_float16), and the near-random classifier's accuracy on the fake
    # batch by one sample at 4 of 16 (policy, seed) pairs, where two logits nearly tie. The CI machine
    # hit the one-sample flip at this test's seed; a relative tolerance around an accuracy of 0 cannot
    # allow it. Summing instead of averaging over replicas would double a loss, far outside these.
    loss_tolerance = 1e-5 if policy == "float32" else 5e-3
    accuracy_tolerance = 0.0 if policy == "float32" else 1 / BATCH
    for name in ("d_loss", "g_loss", "q_loss"):
        assert float(got[name]) == pytest.approx(float(expected[name]), rel=loss_tolerance), name
    for name in ("q_accuracy_real", "q_accuracy_fake"):
        assert abs(float(got[name]) - float(expected[name])) <= accuracy_tolerance + 1e-6, name
    for name in ("d_skipped", "g_skipped", "q_skipped", "d_loss_scale", "g_loss_scale", "q_loss_scale"):
        assert float(got[name]) == float(expected[name]), name
    for name in ("d", "g", "q"):
        one, two = (_first_moments(g, name) for g in (single, distributed))
        if policy == "float32":
            assert _relative_difference(one, two) < 1e-4, name
        else:
            # Low-precision gradients at initialization are partly rounding, and two replicas round
            # differently (synchronized BN, the all-reduce). Per optimizer, the two-replica update must
            # point the way the one-device update does and keep its size (a loss summed instead of
            # averaged over replicas would double it). Measured, seeds 0-7 (weights and batch), width
            # 0.25, batch 16: cosine >= 0.912 (float16; d >= 0.996, g >= 0.949, q >= 0.912) and
            # >= 0.837 (bfloat16; d >= 0.957, g >= 0.837, q >= 0.964); norm ratio 0.889-1.038 (float16),
            # 0.922-1.043 (bfloat16). The bounds leave margin and reject an update at cosine 0.4.
            cosine = float(one @ two / (np.linalg.norm(one) * np.linalg.norm(two)))
            assert cosine > MIN_COSINE_TO_ONE_DEVICE[policy], (name, cosine)
            assert 0.8 < np.linalg.norm(two) / np.linalg.norm(one) < 1.25, name

    # G's average, updated once in cross-replica context: 0.1 of G's start (the warm-up's first decay) and 0.9
    # of G's new weights.
    expected = [0.1 * start + 0.9 * v.numpy() for start, v in zip(g_start, distributed.g_variables)]
    assert max(np.abs(a - e).max() for a, e in zip(distributed.ema_values(), expected)) < 1e-6
    for step in (1, 2):  # a few more steps: the replicas stay identical
        distributed.train_step(*_distributed(distributed, _global_batch(step)))
    _assert_replicas_equal_and_finite(distributed)
    assert int(distributed.step.numpy()) == 3


def test_per_replica_xla_runs_without_synchronized_batch_norm(mirrored):
    trainer = _trainer(mirrored, jit=True, sync_bn=False)
    assert trainer.compile_mode == "forward_backward" and not trainer.synchronized_batch_norm
    for step in range(2):
        metrics = trainer.train_step(*_distributed(trainer, _global_batch(step)))
    assert np.isfinite(float(metrics["d_loss"]))
    # Keras 3 keeps each replica's own batch-norm moving statistics when they are not synchronized.
    _assert_replicas_equal_and_finite(trainer, trainable_only=True)


def test_auto_is_one_device_here_and_equal_settings_share_one_strategy(mirrored):
    assert distribute.strategy_name(distribute.make_strategy("auto")) == "default"
    # A second MirroredStrategy over the same devices would clash with the first's collective keys.
    assert distribute.make_strategy("auto", ["/CPU:0", "cpu:1"]) is mirrored
    assert distribute.replica_devices(mirrored) == ["cpu:0", "cpu:1"]


def test_compile_plan(mirrored):
    assert distribute.compile_plan(tf.distribute.get_strategy(), True, False)[0] == "step"
    assert distribute.compile_plan(mirrored, True, True)[0] == "off"   # CPU collectives: no XLA
    assert distribute.compile_plan(mirrored, True, False)[0] == "forward_backward"
    assert distribute.compile_plan(mirrored, False, False)[0] == "off"


def _settled_trainer(strategy, sync_bn):
    """A mixed_float16 trainer after one honest step, its loss scales pinned (no natural overflow later)."""
    trainer = _trainer(strategy, sync_bn=sync_bn)
    _pin_loss_scales(trainer)
    trainer.train_step(*_distributed(trainer, _global_batch(0)))
    return trainer


@pytest.fixture(scope="module")
def unsynchronized_trainer(mirrored):
    """One settled trainer for the overflow tests without synchronized batch norm: each injects its overflow
    from the state the previous one left (they compare against the state just before their own step)."""
    try:
        tf_step.precision.set_policy("mixed_float16")
        return _settled_trainer(mirrored, sync_bn=False)
    finally:
        keras.mixed_precision.set_global_policy("float32")


def _overflow_on_replica(strategy, victim, replica, monkeypatch, sync_bn, guard=True, trainer=None):
    """One step of a mixed_float16 trainer (`trainer`, else a new settled one) whose `victim` loss overflows on
    `replica` only."""
    trainer = trainer or _settled_trainer(strategy, sync_bn)
    optimizers = {"d": trainer.d_optimizer, "g": trainer.g_optimizer, "q": trainer.q_optimizer}
    honest_scale_loss = tf_step.precision.scale_loss

    def overflowing_scale_loss(optimizer, loss):
        scaled = honest_scale_loss(optimizer, loss)
        if optimizer is not optimizers[victim]:
            return scaled
        replica_id = tf.distribute.get_replica_context().replica_id_in_sync_group
        return scaled * tf.where(tf.equal(replica_id, replica), np.float32("inf"), 1.0)

    monkeypatch.setattr(tf_step.precision, "scale_loss", overflowing_scale_loss)
    if not guard:
        monkeypatch.setattr(tf_step.distribute, "agree_on_finite", lambda grads: grads)
    trainer.retrace()
    before = {k: (_per_replica(trainer, o.dynamic_scale), _per_replica(trainer, o.iterations))
              for k, o in optimizers.items()}
    metrics = trainer.train_step(*_distributed(trainer, _global_batch(1)))
    return trainer, optimizers, before, metrics


# Synchronized batch norm all-reduces in the backward pass too, which spreads a NaN to every replica's
# gradients upstream of it; without it the overflow stays on its replica: the case Keras gets wrong.
@pytest.mark.parametrize("victim, sync_bn", [("d", False), ("g", False), ("q", False), ("d", True)],
                         ids=["d", "g", "q", "d-sync_bn"])
def test_overflow_on_the_second_replica_skips_on_every_replica(victim, sync_bn, mirrored, unsynchronized_trainer,
                                                               monkeypatch, set_policy):
    set_policy("mixed_float16")
    trainer, optimizers, before, metrics = _overflow_on_replica(mirrored, victim, 1, monkeypatch, sync_bn,
                                                                trainer=None if sync_bn else unsynchronized_trainer)
    for name, optimizer in optimizers.items():
        scales, iterations = _per_replica(trainer, optimizer.dynamic_scale), _per_replica(trainer, optimizer.iterations)
        old_scales, old_iterations = before[name]
        if name == victim:
            assert scales == [s / 2 for s in old_scales], "the scale must halve on every replica"
            assert iterations == old_iterations, "the step must be skipped on every replica"
            assert int(metrics[f"{name}_skipped"]) == 1
        else:
            assert scales == old_scales and iterations == [i + 1 for i in old_iterations]
    _assert_replicas_equal_and_finite(trainer, trainable_only=not sync_bn)


def test_without_the_guard_keras_applies_another_replicas_overflow(mirrored, monkeypatch, set_policy):
    """Why agree_on_finite exists: Keras decides from the first replica's local gradients."""
    set_policy("mixed_float16")
    trainer, optimizers, before, _ = _overflow_on_replica(mirrored, "d", 1, monkeypatch, sync_bn=False, guard=False)
    if _per_replica(trainer, trainer.d_optimizer.iterations) == before["d"][1]:
        pytest.skip("this Keras checks every replica's gradients itself; the guard is then belt and braces")
    weights = trainer.models.d_head.trainable_variables
    assert not all(np.isfinite(v.numpy()).all() for v in weights), "an inf update was expected"


def _free_ports(count):
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("localhost", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def _start_two_workers(tmp_path, *args):
    """Two `acgan.train --strategy multi_worker` processes on free localhost ports, worker 0 first."""
    workers = [f"localhost:{port}" for port in _free_ports(2)]
    common = ["--strategy", "multi_worker", "--batch", "16", "--width", "0.125", "--warmup_steps", "0",
              "--data_dir", str(tmp_path / "data"), "--output_dir", str(tmp_path / "run"), *args]
    processes = []
    for index in range(2):
        tf_config = {"cluster": {"worker": workers}, "task": {"type": "worker", "index": index}}
        env = dict(os.environ, TF_CONFIG=json.dumps(tf_config), TF_CPP_MIN_LOG_LEVEL="2", TMPDIR=str(tmp_path))
        processes.append(subprocess.Popen([sys.executable, "-m", "acgan.train", *common], env=env,
                                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    return processes


def _finish(processes, timeout=300):
    """[(exit status, stdout, stderr)] of every process; kills them all if one hangs."""
    results = []
    for process in processes:
        try:
            out, err = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            for p in processes:
                p.kill()
            raise
        results.append((process.returncode, out, err))
    return results


def test_two_workers_on_localhost_agree_and_only_the_chief_writes(tmp_path, data_dir_with_doodles):
    run_dir = tmp_path / "run"
    data_dir_with_doodles(tmp_path / "data")
    results = _finish(_start_two_workers(tmp_path, "--steps", "3", "--sample_every", "2", "--checkpoint_every", "2"))
    for status, _, err in results:
        assert status == 0, err[-3000:]
    outputs = [out for _, out, _ in results]
    fingerprints = [line.split()[-1] for out in outputs for line in out.splitlines()
                    if line.startswith("weights fingerprint:")]
    assert len(fingerprints) == 2 and fingerprints[0] == fingerprints[1], outputs
    assert "run folder:" in outputs[0] and "worker done" in outputs[1]
    report = json.loads((run_dir / "report.json").read_text())
    assert report["distribution"]["workers"] == 2 and report["distribution"]["replicas"] == 2
    assert report["weights_fingerprint"] == fingerprints[0]
    assert report["timing"]["samples_per_second_per_replica"] == pytest.approx(
        report["timing"]["samples_per_second"] / 2)
    assert sorted(p.name for p in (run_dir / "samples").iterdir()) == ["final.png", "step_0000002.png"]
    # Only the chief wrote: the other worker's scratch folder is gone and nothing else appeared.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data", "run"]


def test_sigterm_to_one_worker_stops_both_at_the_same_step(tmp_path, data_dir_with_doodles):
    data_dir_with_doodles(tmp_path / "data")
    processes = _start_two_workers(tmp_path, "--steps", "100000", "--sample_every", "1000", "--checkpoint_every", "2")
    checkpoints = tmp_path / "run" / "checkpoints"
    deadline = time.time() + 240
    while tf.train.latest_checkpoint(str(checkpoints)) is None:
        assert time.time() < deadline and all(p.poll() is None for p in processes), "no checkpoint appeared"
        time.sleep(0.2)
    processes[1].send_signal(signal.SIGTERM)  # the non-chief worker only
    results = _finish(processes)
    stops = []
    for status, _, err in results:
        assert status == 128 + signal.SIGTERM, err[-3000:]
        stops += [line for line in err.splitlines() if "stopped by SIGTERM at step" in line]
    assert len(stops) == 2 and stops[0] == stops[1], stops
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    assert report["status"] == "interrupted" and f"at step {report['steps']};" in stops[0]


@pytest.mark.parametrize("tf_config, message", [
    (None, "needs TF_CONFIG"),
    ("{not json", "TF_CONFIG must be JSON"),
    ('{"cluster": {"worker": ["localhost:1"]}, "task": {"type": "worker", "index": 3}}', "TF_CONFIG must be JSON"),
])
def test_multi_worker_without_a_usable_tf_config(tf_config, message, monkeypatch):
    if tf_config is None:
        monkeypatch.delenv("TF_CONFIG", raising=False)
    else:
        monkeypatch.setenv("TF_CONFIG", tf_config)
    with pytest.raises(distribute.UserError, match=message):
        distribute.make_strategy("multi_worker")


def test_global_batch_must_divide_by_the_replicas():
    distribute.check_global_batch(16, 2)
    with pytest.raises(distribute.UserError, match="--batch 15 does not divide by the 2 replicas"):
        distribute.check_global_batch(15, 2)


def test_cost_counts_every_device():
    from acgan.training.report import run_cost

    gpu = {"kind": "GPU", "name": "Tesla T4"}
    one = run_cost(100.0, None, gpu, {"replicas": 1, "workers": 1})
    four = run_cost(100.0, None, gpu, {"replicas": 4, "workers": 1})
    assert four["price_per_hour"] == pytest.approx(4 * one["price_per_hour"])
    assert four["cost_per_million_batches"] == pytest.approx(4 * one["cost_per_million_batches"])
    given = run_cost(100.0, 2.0, gpu, {"replicas": 8, "workers": 2})  # --price_per_hour is per machine
    assert given["price_per_hour"] == 4.0 and given["priced_unit"] == "machine"
    cpu = run_cost(100.0, None, {"kind": "CPU", "name": "AMD EPYC"}, {"replicas": 2, "workers": 1})
    assert cpu["cost_per_million_batches"] is None


def test_a_run_moves_between_two_replicas_and_one_device(tmp_path, set_policy, data_dir_with_doodles):
    """Preempted on one machine, resumed on another: the checkpoint does not depend on the replicas."""
    from acgan.config import Config
    from acgan.training import loop

    set_policy("mixed_float16")
    config = Config(batch=16, width=0.125, jit=False, sample_every=None, warmup_steps=0, checkpoint_every=2,
                    data_dir=str(data_dir_with_doodles(tmp_path / "data")), output_dir=str(tmp_path / "run"),
                    policy="mixed_float16")
    two = loop.run(dataclasses.replace(config, steps=2, devices=("cpu:0", "cpu:1")))
    one = loop.run(dataclasses.replace(config, steps=4, strategy="default", resume=True))
    again = loop.run(dataclasses.replace(config, steps=6, devices=("cpu:0", "cpu:1"), resume=True))
    assert [r.status for r in (two, one, again)] == ["completed"] * 3
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    assert report["steps"] == 6 and report["distribution"]["replicas"] == 2
    assert report["resumed_from"]["step"] == 4
    saved = tf.train.load_checkpoint(str(tmp_path / "run" / "checkpoints" / "ckpt-4"))
    scale = saved.get_tensor("gan/d_optimizer/dynamic_scale/.ATTRIBUTES/VARIABLE_VALUE")
    assert report["resumed_from"]["loss_scales"]["d"] == float(scale)
