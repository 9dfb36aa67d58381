"""Sample grids as pictures: uint8 images laid out one row per class, saved as PNG (numpy and Pillow only)."""
import io

import numpy as np
from PIL import Image

from acgan.util.files import write_atomically


def to_uint8(images):
    """float images in [0, 1] -> uint8 [0, 255]."""
    return np.clip(np.rint(np.asarray(images, dtype=np.float32) * 255.0), 0, 255).astype(np.uint8)


def make_grid(images, rows, padding=2):
    """images [rows*cols, H, W, C] uint8, row-major -> one uint8 image [rows*(H+p)+p, cols*(W+p)+p, C]."""
    images = np.asarray(images)
    count, height, width, depth = images.shape
    cols = count // rows
    grid = np.zeros(
        (rows * (height + padding) + padding, cols * (width + padding) + padding, depth), np.uint8
    )
    for i in range(rows * cols):
        r, c = divmod(i, cols)
        top, left = padding + r * (height + padding), padding + c * (width + padding)
        grid[top : top + height, left : left + width] = images[i]
    return grid


def save_grid(images, rows, path, scale=2):
    """Saves a grid of uint8 images as a PNG, upscaled `scale` times with nearest neighbour."""
    grid = make_grid(images, rows)
    picture = Image.fromarray(grid[..., 0] if grid.shape[-1] == 1 else grid)
    picture = picture.resize((picture.width * scale, picture.height * scale), Image.NEAREST)
    buffer = io.BytesIO()
    picture.save(buffer, format="PNG")
    write_atomically(path, buffer.getvalue())
    return grid
