"""A GraphDef is a program: acgan runs only the math and network ops on the way to the features and the
logits weight (acgan.quality.inception_ops). A file, process or Python op wired into that path, by a data
input or by a control input, is refused in one line before TensorFlow imports anything; one off that
path is left out of the import; the tests' stand-in for the 2015 graph, with its numerics checks waited
on by control inputs, passes."""

import pytest

from acgan.errors import UserError
from acgan.quality import inception, inception_ops
from inception_graph import graph_def, with_op


def _with(tmp_path, op=None, wire=None):
    """inception_graph.with_op's graph, its target in tmp_path, written to a file: (path, GraphDef)."""
    graph = with_op(op, wire, target=tmp_path / "written-by-the-graph")
    path = tmp_path / f"{op}-{wire}.pb"
    path.write_bytes(graph.SerializeToString())
    return path, graph


@pytest.mark.parametrize(
    "op, wire", [("ReadFile", "data"), ("PyFunc", "data"), ("WriteFile", "control")]
)
def test_a_file_or_python_op_on_the_path_is_refused_however_it_is_wired(tmp_path, op, wire):
    path, _ = _with(tmp_path, op, wire)
    with pytest.raises(UserError) as error:
        inception.read_graph(path)
    assert str(error.value) == (
        f"--inception {path} is refused: its node leak runs the op {op}, which is not among the math "
        "and network ops acgan runs of an Inception graph (docs/quality.md)"
    )
    assert not (tmp_path / "written-by-the-graph").exists()


def test_a_control_input_from_the_fed_node_is_followed_and_a_function_library_refused(tmp_path):
    """Only a data input from ExpandDims is replaced by the images: a control input from it would run
    it, and the decoding before it (DecodeJpeg: a Placeholder in the tests' graph)."""
    path, graph = _with(tmp_path, wire=None)
    next(node for node in graph.node if node.name == "conv/Conv2D").input.append("^ExpandDims")
    path.write_bytes(graph.SerializeToString())
    with pytest.raises(
        UserError, match="its node DecodeJpeg runs the op Placeholder, which is not"
    ):
        inception.read_graph(path)
    graph = graph_def()
    graph.library.function.add().signature.name = "leak"
    with pytest.raises(UserError, match="is refused: it defines functions"):
        inception_ops.runnable(graph, ["pool_3"], "ExpandDims", path)


def test_the_stand_in_graph_passes_and_a_node_off_the_path_is_left_out_of_the_import(tmp_path):
    path, full = _with(tmp_path, "ReadFile", wire=None)
    graph = inception.read_graph(path)
    imported = {op.type for op in graph.graph.get_operations()}
    assert {"CheckNumerics", "Identity", "BatchNormWithGlobalNormalization"} <= imported
    assert imported - {"Placeholder"} <= inception_ops.ALLOWED_OPS  # the images' placeholder
    assert "ReadFile" in {node.op for node in full.node} and "ReadFile" not in imported
    kept = inception_ops.runnable(full, ["pool_3"], "ExpandDims", path)
    # control inputs followed, the input's decoding and the head left out
    assert "conv/CheckNumerics" in {node.name for node in kept.node}
    assert not {"Cast", "DecodeJpeg", "ExpandDims", "softmax"} & {node.name for node in kept.node}
