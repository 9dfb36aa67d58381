"""A small stand-in for the 2015-12-05 Inception graph (classify_image_graph_def.pb), for the tests of
the standard FID and Inception score: the same node names on the same path, and the same quirks.

Like the real graph: a decoded image [H, W, 3] (uint8) is cast to float and given a batch dimension of 1
by `ExpandDims` (so every static shape after it says batch 1), resized by `ResizeBilinear` (to 8x8 here,
299x299 there), scaled by `Sub` and `Mul`, goes through a convolution with the legacy
BatchNormWithGlobalNormalization op (then `CheckNumerics`, and an `Identity` that waits on it by a control
input), a legacy `Concat`, then `pool_3` (average pool to [N, 1, 1, F]),
`pool_3/_reshape` (to [1, F]), `softmax/logits/MatMul` (weight `softmax/weights` [F, K]), `softmax/logits`
(plus `softmax/biases`, which the Inception score leaves out) and `softmax`. The GraphDef says producer
version 3 (the legacy ops were removed at version 9), as an old frozen graph does.
"""

import numpy as np

FEATURES, CLASSES, SIZE = 16, 12, 8


def graph_def(features=FEATURES, classes=CLASSES, weight_scale=1.0, seed=0):
    """The GraphDef (a tf.compat.v1.GraphDef); weight_scale 0 makes every softmax uniform."""
    import tensorflow as tf

    rng = np.random.default_rng(seed)
    graph = tf.Graph()
    with graph.as_default():
        image = tf.compat.v1.placeholder(tf.uint8, [None, None, 3], name="DecodeJpeg")
        x = tf.expand_dims(tf.cast(image, tf.float32, name="Cast"), 0, name="ExpandDims")
        x = tf.raw_ops.ResizeBilinear(
            images=x,
            size=tf.constant([SIZE, SIZE], name="ResizeBilinear/size"),
            align_corners=False,
            name="ResizeBilinear",
        )
        x = tf.multiply(tf.subtract(x, 128.0, name="Sub"), 1.0 / 128.0, name="Mul")
        kernel = tf.constant(
            rng.normal(size=(2, 2, 3, features)).astype(np.float32), name="conv/conv2d_params"
        )
        x = tf.nn.conv2d(x, kernel, [1, 1, 1, 1], "SAME", name="conv/Conv2D")
        x = tf.identity(x, name="conv/batchnorm")  # becomes BatchNormWithGlobalNormalization below
        # As after each layer there: a numerics check, waited on by a control input.
        check = tf.debugging.check_numerics(x, "conv", name="conv/CheckNumerics")
        with tf.control_dependencies([check]):
            x = tf.identity(x, name="conv/control_dependency")
        a, b = tf.split(x, 2, axis=3, name="mixed/split")
        x = tf.nn.relu(
            tf.raw_ops.Concat(
                concat_dim=tf.constant(3, name="mixed/join/concat_dim"),
                values=[a, b],
                name="mixed/join",
            ),
            name="conv",
        )
        pool = tf.nn.avg_pool2d(x, [1, SIZE, SIZE, 1], [1, 1, 1, 1], "VALID", name="pool_3")
        flat = tf.reshape(pool, [1, features], name="pool_3/_reshape")
        weight = tf.constant(
            (weight_scale * rng.normal(size=(features, classes))).astype(np.float32),
            name="softmax/weights",
        )
        biases = tf.constant(rng.normal(size=classes).astype(np.float32), name="softmax/biases")
        logits = tf.nn.bias_add(
            tf.matmul(flat, weight, name="softmax/logits/MatMul"), biases, name="softmax/logits"
        )
        tf.nn.softmax(logits, name="softmax")
    out = graph.as_graph_def()
    for node in out.node:
        if node.name == "conv/batchnorm":
            _batch_norm(node, out, features, tf)
    out.versions.producer = 3
    return out


def _batch_norm(node, out, features, tf):
    """Turns the Identity `node` into BatchNormWithGlobalNormalization over conv/Conv2D, with constants."""
    node.op = "BatchNormWithGlobalNormalization"
    names = ("moving_mean", "moving_variance", "beta", "gamma")
    node.input[:] = ["conv/Conv2D", *(f"conv/batchnorm/{name}" for name in names)]
    node.attr.clear()
    node.attr["T"].type = tf.float32.as_datatype_enum
    node.attr["variance_epsilon"].f = 0.001
    node.attr["scale_after_normalization"].b = True
    for name, value in zip(names, (0.1, 2.0, 0.3, 1.5)):
        const = out.node.add(name=f"conv/batchnorm/{name}", op="Const")
        const.attr["dtype"].type = tf.float32.as_datatype_enum
        const.attr["value"].tensor.CopyFrom(
            tf.make_tensor_proto(np.full(features, value, np.float32))
        )


def write_graph(path, rename=(), **kwargs):
    """Writes the graph as a binary .pb at `path` (nodes named in `rename` get another name) and returns path."""
    graph = graph_def(**kwargs)
    for node in graph.node:
        if node.name in rename:
            node.name += "_renamed"
    path.write_bytes(graph.SerializeToString())
    return path


def with_op(op=None, wire=None, target="/nonexistent/acgan-test", name="leak"):
    """The GraphDef with a node `name` running `op` on the constant path `target` (ReadFile, WriteFile or
    PyFunc), wired in by a "data" input (Sub's second input) or a "control" input (of conv/Conv2D), or
    not at all (None): what acgan must refuse to run, or leave out."""
    import tensorflow as tf

    graph = graph_def()
    extra = tf.Graph()
    with extra.as_default():
        path = tf.constant(str(target), name=f"{name}/path")
        if op == "ReadFile":
            tf.io.read_file(path, name=name)
        elif op == "WriteFile":
            tf.io.write_file(path, path, name=name)
        elif op == "PyFunc":
            tf.compat.v1.py_func(lambda x: x, [path], tf.string, name=name)
    graph.node.extend(extra.as_graph_def().node)
    nodes = {node.name: node for node in graph.node}
    if wire == "data":
        nodes["Sub"].input[1] = name
    elif wire == "control":
        nodes["conv/Conv2D"].input.append(f"^{name}")
    return graph


def constant(graph, name):
    """The value of the Const node `name` of a GraphDef."""
    import tensorflow as tf

    return tf.make_ndarray(
        next(node for node in graph.node if node.name == name).attr["value"].tensor
    )


def features_one_at_a_time(path, images):
    """pool_3 features [N, F] of images [N, H, W, 3], fed to the graph as the original Inception-score code
    feeds it: one image at a time into ExpandDims:0, the graph imported as it is."""
    import tensorflow as tf

    graph_def = tf.compat.v1.GraphDef()
    graph_def.ParseFromString(path.read_bytes())
    graph = tf.Graph()
    with graph.as_default():
        tf.graph_util.import_graph_def(graph_def, name="")
    with tf.compat.v1.Session(graph=graph) as session:
        return np.concatenate(
            [
                session.run("pool_3:0", {"ExpandDims:0": image[None].astype(np.float32)}).reshape(
                    1, -1
                )
                for image in images
            ]
        ).astype(np.float64)
