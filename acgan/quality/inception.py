"""The standard FID and Inception score, the numbers papers print, computed with the network of the
original FID code (TTUR's fid.py) and Inception-score code (improved-GAN's): the 2015-12-05 Inception
graph classify_image_graph_def.pb, a TensorFlow GraphDef the user downloads once (this module never
downloads). Only `acgan.evaluate --inception PATH` loads it; importing this module loads no framework.

The recipe: uint8 RGB images go in as float 0-255 at their own size, in place of the graph's
`ExpandDims` output (the graph itself then resizes them to 299x299, bilinear, and scales them); the
features are `pool_3`, 2048-d. FID: the Fréchet distance between the generated images' features and
every real train image's. Inception score: exp(E KL(p(y|x) || p(y))) with p(y|x) = softmax(pool_3 @ W),
W the weight of `softmax/logits/MatMul` (1008 classes, without the bias, as improved-GAN computes it),
its mean and standard deviation over 10 consecutive splits of the images. In the same features: KID
(metrics.kernel_distance) and the per-class FID (StudioGAN's iFID: each class's generated images
against its train images, the mean over classes). The train images' features are cached; inception_stats
reads or writes their mean and covariance in TTUR's format, and inception_ops keeps a graph from running
anything but math and network ops on the way to the features.
"""

import contextlib
import hashlib
import importlib.util
import json
import os
import time
import zipfile
from pathlib import Path

import numpy as np

from acgan import backend as backend_lib
from acgan.errors import UserError
from acgan.quality import inception_ops, inception_stats
from acgan.quality.metrics import (
    class_counts,
    frechet_distance,
    inception_score,
    kernel_distance,
    moments,
    per_class_frechet,
)
from acgan.training.run_dir import read_run

GRAPH_FILE = "classify_image_graph_def.pb"
ARCHIVE_URL = "http://download.tensorflow.org/models/image/imagenet/inception-2015-12-05.tgz"
# the nodes the recipe reads
INPUT, FEATURES, LOGITS_MATMUL = (
    "ExpandDims",
    "pool_3",
    "softmax/logits/MatMul",
)
SAMPLES = 50_000  # generated images by default, against every real train image (PyTorch-StudioGAN's table)
SPLITS = 10
BATCH = 100
CACHE_FORMAT = "acgan-inception-real/2"  # /2: the features themselves
PROTOCOL = (
    "2015-12-05 Inception graph (TTUR's FID, improved-GAN's Inception score): images as float 0-255 at "
    "their own size into ExpandDims, resized to 299x299 inside the graph, 2048-d pool_3 features; the "
    "Inception score of softmax(pool_3 @ the softmax/logits weight), 10 splits"
)


def graph_path(path):
    """The graph file `path` names (a folder: its classify_image_graph_def.pb); UserError when it is missing."""
    path = Path(path).expanduser().absolute()
    if path.is_dir():
        path = path / GRAPH_FILE
    if not path.is_file():
        raise UserError(
            f"--inception {path} does not exist: download the Inception graph once and unpack "
            f"{GRAPH_FILE} from it ({ARCHIVE_URL}; the commands are in docs/quality.md)"
        )
    return path


def read_graph(path, stats=None):
    """The InceptionGraph of the file `path` names, checked; UserError (one line) for a file that is not a
    TensorFlow GraphDef, a GraphDef without the nodes the recipe reads, or one whose path to them runs
    an op outside inception_ops.ALLOWED_OPS (only that path is imported). stats: the --inception_stats
    file, read and checked against the graph (graph.stats: inception_stats.read_stats'). Loads TensorFlow."""
    path = graph_path(path)
    data = path.read_bytes()
    if data[:2] == b"\x1f\x8b":
        raise UserError(
            f"--inception {path} is a gzip archive: unpack {GRAPH_FILE} from it first "
            f"(tar xzf {path} {GRAPH_FILE})"
        )
    import tensorflow as tf  # here: only --inception needs TensorFlow, on the TensorFlow backend
    from google.protobuf.message import DecodeError

    graph_def = tf.compat.v1.GraphDef()
    try:
        graph_def.ParseFromString(data)
    except DecodeError:
        graph_def.Clear()
    if not graph_def.node:
        raise UserError(
            f"--inception {path} is not a TensorFlow GraphDef: give {GRAPH_FILE}, unpacked from "
            f"{ARCHIVE_URL}"
        )
    names = {node.name for node in graph_def.node}
    missing = [name for name in (INPUT, FEATURES, LOGITS_MATMUL) if name not in names]
    if missing:
        raise UserError(
            f"--inception {path} is a GraphDef without {', '.join(missing)}: not the 2015-12-05 "
            f"Inception graph ({GRAPH_FILE} from {ARCHIVE_URL})"
        )
    graph_def = inception_ops.runnable(graph_def, (FEATURES, LOGITS_MATMUL), INPUT, path)
    graph = InceptionGraph(path, graph_def, hashlib.sha256(data).hexdigest())
    if stats is not None:
        graph.stats = inception_stats.read_stats(stats, graph.weight.shape[0])
    return graph


class InceptionGraph:
    """The graph in a TensorFlow session, fed a batch of any size in place of `ExpandDims`.

    It was frozen for one image at a time: `ExpandDims` adds a batch dimension of 1 to a decoded JPEG,
    so every shape after it says batch 1, and TensorFlow refuses to feed it more. TTUR rewrites those
    shapes after the import; here the import maps `ExpandDims:0` to a placeholder of shape
    [None, None, None, 3], and the graph's shapes are inferred from it. `stats`: where its real side's
    statistics come from or go to (read_graph's), None for the train images' alone."""

    def __init__(self, path, graph_def, sha256):
        import tensorflow as tf  # here: as in read_graph

        self.path, self.sha256, self.stats = path, sha256, None
        # devices and shapes written in 2015 would pin ops or say batch 1
        for node in graph_def.node:
            node.device = ""
            node.attr.pop("_output_shapes", None)
        self.graph = tf.Graph()
        try:
            with self.graph.as_default():
                self.images = tf.compat.v1.placeholder(
                    tf.float32, [None, None, None, 3], name="acgan_images"
                )
                tf.graph_util.import_graph_def(
                    graph_def, input_map={f"{INPUT}:0": self.images}, name="inception"
                )
                self.features = self.graph.get_tensor_by_name(f"inception/{FEATURES}:0")
                weight = self.graph.get_operation_by_name(f"inception/{LOGITS_MATMUL}").inputs[1]
        except (ValueError, TypeError, KeyError, tf.errors.OpError) as e:
            raise UserError(
                f"--inception {path}: TensorFlow cannot import it as the Inception graph "
                f"({str(e).splitlines()[0] if str(e) else type(e).__name__})"
            ) from None
        self.session = tf.compat.v1.Session(
            graph=self.graph, config=tf.compat.v1.ConfigProto(allow_soft_placement=True)
        )
        # [2048, 1008] in the 2015 graph
        self.weight = np.asarray(self.session.run(weight), np.float64)
        shape = self.features.shape
        if shape.rank != 4 or self.weight.ndim != 2 or shape[-1] != self.weight.shape[0]:
            raise UserError(
                f"--inception {path}: its {FEATURES} {shape} and {LOGITS_MATMUL} weight "
                f"{list(self.weight.shape)} do not fit together: not the 2015-12-05 Inception graph"
            )

    def features_of(self, images):
        """pool_3 features [N, F] (float32, as the graph computes them) of images [N, H, W, 3] in 0..255."""
        out = self.session.run(self.features, {self.images: np.asarray(images, np.float32)})
        return np.asarray(out, np.float32).reshape(len(images), -1)

    def run(self, images, echo=None, what="images"):
        """features_of images [N, H, W, 3] in 0..255, BATCH at a time; echo: a progress line every 30 s."""
        features, started, shown = [], time.perf_counter(), time.perf_counter()
        for i in range(0, len(images), BATCH):
            features.append(self.features_of(images[i : i + BATCH]))
            if echo is not None and time.perf_counter() - shown > 30:
                shown = time.perf_counter()
                echo(
                    f"  {i + len(features[-1]):,} of {len(images):,} {what} ({shown - started:.0f} s)"
                )
        return np.concatenate(features)

    def inception_score(self, features):
        """(mean, standard deviation) over SPLITS splits of the Inception score of softmax(features @ W);
        NaN for fewer images than splits."""
        if len(features) < SPLITS:
            return np.nan, np.nan
        probs = [
            softmax(np.asarray(features[i : i + BATCH], np.float64) @ self.weight).astype(
                np.float32
            )
            for i in range(0, len(features), BATCH)
        ]
        return inception_score(np.concatenate(probs), SPLITS)


def softmax(logits):
    z = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return z / z.sum(axis=-1, keepdims=True)


def scores(graph, fake, labels, train_set, dataset, cache_dir, stats=None, echo=print, seed=0):
    """The result's "inception" entry: the standard FID, KID and per-class FID (StudioGAN's iFID) of
    `fake` (uint8 [N, H, W, 3], generated for `labels`) against every image of `train_set` (an ImageSet),
    the Inception score of `fake` and of the train images, the sample counts and the graph file. The train
    images' features are cached in `cache_dir` (once per graph and images). stats (read_stats'): real
    statistics to take the FID's real side from (no KID, iFID nor real Inception score then: they need
    the real features), or the file to write the train images' statistics to. KID's subsets: `seed`."""
    from_file = stats is not None and "mu" in stats
    real = None if from_file else real_features(graph, train_set.images, cache_dir, echo)
    echo(
        f"standard FID and Inception score: {len(fake):,} generated images through the Inception graph"
    )
    features = graph.run(fake, echo, "generated images")
    mean, std = graph.inception_score(features)
    entry = {
        "inception_score": mean,
        "inception_score_std": std,
        "splits": SPLITS,
        "num_generated": int(len(fake)),
        "graph": str(graph.path),
        "sha256": graph.sha256,
        "feature_dim": int(graph.weight.shape[0]),
        "protocol": PROTOCOL,
    }
    if from_file:
        entry.update(
            dict.fromkeys(REAL_FEATURE_KEYS),
            num_real=None,
            real=f"the statistics in {stats['path']}",
        )
        mu, sigma = stats["mu"], stats["sigma"]
    else:
        mu, sigma = moments(real)
        entry.update(_against_features(graph, real, train_set, features, labels, seed))
        if stats is not None:
            stats = dict(
                stats,
                sha256=inception_stats.write_npz(stats["path"], mu=mu, sigma=sigma),
            )
    entry["fid"] = frechet_distance(*moments(features), mu, sigma)
    entry["real_statistics"] = stats and {
        "file": str(stats["path"]),
        "sha256": stats["sha256"],
        "read": from_file,
    }
    entry["note"] = comparability(
        dataset, len(fake), entry["num_real"], stats["path"] if from_file else None
    )
    return entry


# What an entry computes from the real images' features, which a statistics file does not hold.
REAL_FEATURE_KEYS = (
    "kernel_distance",
    "fid_per_class",
    "fid_class_mean",
    "real_inception_score",
    "real_inception_score_std",
    "num_real_per_class",
    "num_generated_per_class",
)


def _against_features(graph, real, train_set, features, labels, seed):
    """The entries measured against the real train images' features `real` (REAL_FEATURE_KEYS, num_real)."""
    per_class, class_mean = per_class_frechet(
        real, train_set.labels, features, labels, train_set.num_classes
    )
    real_score, real_std = graph.inception_score(real)
    return {
        "kernel_distance": kernel_distance(real, features, seed=seed),
        "fid_per_class": dict(zip(train_set.class_names, per_class)),
        "fid_class_mean": class_mean,
        "real_inception_score": None if np.isnan(real_score) else real_score,
        "real_inception_score_std": None if np.isnan(real_std) else real_std,
        "num_real": int(len(real)),
        "real": "every image of the train split",
        "num_real_per_class": class_counts(train_set.labels, train_set.num_classes).tolist(),
        "num_generated_per_class": class_counts(labels, train_set.num_classes).tolist(),
    }


# The counts of the protocol papers print CIFAR-10's FID and Inception score at.
PAPERS_GENERATED = PAPERS_REAL = 50_000


def comparability(dataset, num_generated, num_real, stats_file=None):
    """What the numbers compare with: papers' only at their protocol's counts on CIFAR-10's whole train
    set; otherwise what differs. num_real None: the real side is `stats_file`, which cannot say."""
    if dataset != "cifar10":
        return (
            f"on {dataset}, comparable only with other runs on it at the same sample counts: papers "
            "print these numbers for CIFAR-10 and other photograph sets"
        )
    differs = [] if num_generated == PAPERS_GENERATED else [f"{num_generated:,} generated"]
    if num_real is not None and num_real != PAPERS_REAL:
        differs.append(
            f"{num_real:,} real train images (a train set cut by --max_per_class or --classes)"
        )
    if differs:
        return (
            f"not the papers' protocol: {' and '.join(differs)}, where papers take 50,000 generated "
            "against all 50,000 train images (FID falls as the counts grow), so comparable only with "
            "runs at these counts"
        )
    if num_real is None:
        return (
            "comparable with papers' CIFAR-10 Inception score (50,000 generated), and their FID if "
            f"{stats_file} holds the statistics of the 50,000 train images (TTUR's "
            "fid_stats_cifar10_train.npz does)"
        )
    return (
        "comparable with papers' CIFAR-10 FID and Inception score (50,000 generated against the 50,000 "
        "train images)"
    )


def real_features(graph, images, cache_dir, echo=print):
    """pool_3 features [N, F] (float32) of real images, from the cache in `cache_dir` when it holds them
    for this graph (its sha256) and these very images, else computed and cached there."""
    key = {
        "format": CACHE_FORMAT,
        "graph_sha256": graph.sha256,
        "shape": list(images.shape),
        "images_sha1": hashlib.sha1(np.ascontiguousarray(images).tobytes()).hexdigest(),
    }
    digest = hashlib.sha1(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    path = Path(cache_dir) / f"inception-real-{digest}.npz"
    # missing or unreadable: computed again, and written
    with (
        contextlib.suppress(OSError, ValueError, KeyError, zipfile.BadZipFile),
        np.load(path) as cached,
    ):
        return cached["features"]
    echo(
        f"standard FID: {len(images):,} real train images through the Inception graph "
        f"(once: cached in {path})"
    )
    features = graph.run(images, echo, "real train images")
    inception_stats.write_npz(path, features=features)
    return features


def unavailable(dataset, image_shape):
    """The "inception" entry of an evaluation without the graph: {"fid": None, "note": why}."""
    return {
        "fid": None,
        "note": "not computed: acgan.evaluate --inception PATH computes the standard FID and "
        "Inception score"
        if image_shape[-1] == 3
        else f"not applicable: the standard FID and Inception score are defined for RGB "
        f"photographs, and {dataset}'s images are {'x'.join(map(str, image_shape))}",
    }


def backend_for(backend, run):
    """TensorFlow, which runs the Inception graph: the backend of an evaluation with --inception. UserError
    (one line) for a run whose images are not RGB, another backend chosen, or no TensorFlow installed."""
    config, info = read_run(Path(run))
    image_shape = info.get("image_shape") or []
    if image_shape[-1:] != [3]:
        raise UserError(
            f"--inception needs RGB images: {config.dataset}'s are {'x'.join(map(str, image_shape))}, "
            "and the Inception network takes colour photographs"
        )
    chosen = backend or backend_lib.running() or os.environ.get("KERAS_BACKEND")
    if chosen not in (None, "tensorflow"):
        raise UserError(
            f"--inception runs the Inception graph on TensorFlow, not {chosen}: evaluate with "
            "--backend tensorflow" + (" in a new process" if backend_lib.running() else "")
        )
    if importlib.util.find_spec("tensorflow") is None:
        raise UserError(
            f"--inception needs TensorFlow, which is not installed: {backend_lib.INSTALL['tensorflow']}"
        )
    return "tensorflow"
