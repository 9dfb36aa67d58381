import numpy as np
import pytest

from acgan.errors import UserError
from acgan.model import blocks, networks


@pytest.mark.parametrize(
    "shape, counts",
    [
        ((28, 28, 1), (6_665_153, 6_560_448, 1_025, 133_002)),
        ((32, 32, 3), (8_642_883, 8_528_576, 1_025, 133_002)),
    ],
)
def test_reference_shapes_and_parameter_counts(shape, counts):
    m = networks.build_models(shape, 10)
    assert tuple(part.count_params() for part in m) == counts
    z = np.zeros((2, networks.NOISE_DIM), np.float32)
    images = m.generator([z, np.array([0, 9], np.int32)])
    assert tuple(images.shape) == (2,) + shape
    features = m.trunk(images)
    assert tuple(features.shape) == (2, 1024)
    assert tuple(m.d_head(features).shape) == (2, 1)
    assert tuple(m.q_head(features).shape) == (2, 10)


def test_width_scales_channels_in_multiples_of_eight():
    m = networks.build_models((28, 28, 1), 10, width=0.25)
    assert tuple(part.count_params() for part in m) == (437_489, 411_312, 257, 8_682)
    for part in m:
        for layer in part.layers:
            units = getattr(layer, "units", None) or getattr(layer, "filters", None)
            if units and layer.name not in ("d_logit", "q_logits", "g_deconv2"):
                assert units % 8 == 0, layer.name
    assert [blocks.channels(n, 0.3) for n in (64, 128, 1024)] == [16, 40, 304]
    assert blocks.channels(64, 0.01) == 8


@pytest.mark.parametrize("shape", [(28, 28, 2), (30, 30, 1), (28, 32, 1)])
def test_unsupported_image_shapes_are_refused(shape):
    with pytest.raises(UserError, match="not supported"):
        networks.build_models(shape, 10)
