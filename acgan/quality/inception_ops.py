"""What acgan runs of a GraphDef given to --inception: a GraphDef is a program, and TensorFlow has ops
that read and write files, start processes or call Python. Before the import, `runnable` walks every
node the features and the logits weight depend on, through data and control inputs alike, and refuses
(one line) any op outside ALLOWED_OPS and any function library; the nodes off that path are dropped, so
they never reach TensorFlow. Pure protobuf walking: no TensorFlow needed to decide."""

from acgan.errors import UserError

# The math and network ops of the 2015-12-05 Inception graph on the way to pool_3 and the logits
# weight (each convolution: Conv2D, BatchNormWithGlobalNormalization, CheckNumerics and an Identity that
# waits on it by a control input, Relu; the pools; the Concat joins; weights as Const), the ops of its
# input (ExpandDims, Cast) and head (Reshape, MatMul, BiasAdd, Add, Softmax), and Split (the same kind,
# which the tests' small graph uses). None of them reads or writes anything outside its tensors.
ALLOWED_OPS = frozenset(
    {
        "Add",
        "AvgPool",
        "BatchNormWithGlobalNormalization",
        "BiasAdd",
        "Cast",
        "CheckNumerics",
        "Concat",
        "Const",
        "Conv2D",
        "ExpandDims",
        "Identity",
        "MatMul",
        "MaxPool",
        "Mul",
        "Relu",
        "Reshape",
        "ResizeBilinear",
        "Softmax",
        "Split",
        "Sub",
    }
)


def runnable(graph_def, roots, fed, path):
    """A copy of `graph_def` (a tf.compat.v1.GraphDef) holding only the nodes `roots` depend on through
    data and control inputs, a data input from node `fed` (which the images replace) ending the walk, a
    control input from it not. UserError (one line) where one of them runs an op outside ALLOWED_OPS, or
    the graph defines functions."""
    if graph_def.library.function or graph_def.library.gradient:
        raise UserError(
            f"--inception {path} is refused: it defines functions (a function library), which the "
            "2015-12-05 Inception graph has none of and acgan does not run"
        )
    nodes = {node.name: node for node in graph_def.node}
    seen, todo = set(), list(roots)
    while todo:
        name = todo.pop()
        if name in seen or name not in nodes:  # a missing node: the import says so
            continue
        seen.add(name)
        node = nodes[name]
        if node.op not in ALLOWED_OPS:
            raise UserError(
                f"--inception {path} is refused: its node {name} runs the op {node.op}, which is not "
                "among the math and network ops acgan runs of an Inception graph (docs/quality.md)"
            )
        for source in node.input:
            control, source = source.startswith("^"), source.lstrip("^").split(":")[0]
            if control or source != fed:
                todo.append(source)
    kept = type(graph_def)()
    kept.versions.CopyFrom(graph_def.versions)
    kept.node.extend(node for node in graph_def.node if node.name in seen)
    return kept
