"""Sample grids a person can read: each row labelled with its class name in a left margin; the images
themselves keep every pixel, and the bare grid stays available."""

import numpy as np
from PIL import Image

from acgan.training import grids

NAMES = ["circle", "square", "triangle"]


def images(rows=3, cols=4, size=8):
    rng = np.random.default_rng(0)
    return rng.integers(0, 256, (rows * cols, size, size, 1), dtype=np.uint8)


def test_labels_sit_in_a_left_margin_and_leave_the_images_alone():
    bare = grids.make_grid(images(), 3)
    labelled = grids.label_rows(bare, NAMES)
    margin = labelled.shape[1] - bare.shape[1]
    assert labelled.shape[0] == bare.shape[0] and margin > 0
    assert np.array_equal(labelled[:, margin:], bare)  # the grid's pixels, untouched
    text = labelled[:, :margin, 0]
    row_height = (bare.shape[0] - 2) // 3
    for r in range(3):  # every row has its own name beside it
        assert text[2 + r * row_height : 2 + (r + 1) * row_height].max() > 128
    # The margin fits the widest name: a longer name widens it.
    wider = grids.label_rows(bare, ["circle", "square", "a much longer class name"])
    assert wider.shape[1] > labelled.shape[1]


def test_labels_keep_colour_grids_in_colour():
    rgb = np.repeat(images(), 3, axis=-1)
    labelled = grids.label_rows(grids.make_grid(rgb, 3), NAMES)
    assert labelled.shape[-1] == 3 and labelled.dtype == np.uint8


def test_save_grid_labelled_and_bare(tmp_path):
    bare = grids.save_grid(images(), 3, tmp_path / "bare.png")
    labelled = grids.save_grid(images(), 3, tmp_path / "labelled.png", class_names=NAMES)
    assert np.array_equal(bare, grids.make_grid(images(), 3))
    assert Image.open(tmp_path / "bare.png").size == (bare.shape[1] * 2, bare.shape[0] * 2)
    assert Image.open(tmp_path / "labelled.png").size == (
        labelled.shape[1] * 2,
        labelled.shape[0] * 2,
    )
    assert labelled.shape[1] > bare.shape[1]
