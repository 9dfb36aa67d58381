"""Sample grids as pictures: uint8 images laid out one row per class, saved as PNG (numpy and Pillow only)."""

import io

import numpy as np
from PIL import Image, ImageDraw, ImageFont

from acgan.util.files import write_atomically


def to_uint8(images):
    """float images in [0, 1] -> uint8 [0, 255]."""
    return np.clip(np.rint(np.asarray(images, dtype=np.float32) * 255.0), 0, 255).astype(np.uint8)


def make_grid(images, rows, padding=2):
    """images [rows*cols, H, W, C] uint8, row-major -> one uint8 image [rows*(H+p)+p, cols*(W+p)+p, C]."""
    count, height, width, depth = images.shape
    cols = count // rows
    # Each image with its padding below and to its right, laid out in rows; then the top and left edges.
    cells = np.pad(images[: rows * cols], ((0, 0), (0, padding), (0, padding), (0, 0)))
    grid = cells.reshape(rows, cols, height + padding, width + padding, depth).swapaxes(1, 2)
    grid = grid.reshape(rows * (height + padding), cols * (width + padding), depth)
    return np.pad(grid, ((padding, 0), (padding, 0), (0, 0)))


def label_rows(grid, class_names, padding=2):
    """The grid with a left margin naming each row's class (white text on the grid's black background).

    grid: make_grid's output for len(class_names) rows. The images keep their pixels; the margin is as wide
    as the widest name in Pillow's built-in font (no font files needed) plus padding on both sides.
    """
    rows = len(class_names)
    height, width, depth = grid.shape
    font = ImageFont.load_default()
    measure = ImageDraw.Draw(Image.new("L", (1, 1)))
    boxes = [measure.textbbox((0, 0), str(name), font=font) for name in class_names]
    margin = max(box[2] for box in boxes) + 2 * padding + 2
    row_height = (height - padding) / rows
    label = Image.new("L", (margin, height), 0)
    draw = ImageDraw.Draw(label)
    for r, (name, box) in enumerate(zip(class_names, boxes)):
        centre = padding + r * row_height + (row_height - padding) / 2
        draw.text(
            (padding + 1, round(centre - (box[1] + box[3]) / 2)), str(name), fill=255, font=font
        )
    margin_pixels = np.repeat(np.asarray(label, np.uint8)[..., None], depth, axis=-1)
    return np.concatenate([margin_pixels, grid], axis=1)


def grid_picture(grid, scale=2):
    """A uint8 grid (make_grid, label_rows) as a PIL image, upscaled `scale` times with nearest neighbour."""
    picture = Image.fromarray(grid[..., 0] if grid.shape[-1] == 1 else grid)
    return picture.resize((picture.width * scale, picture.height * scale), Image.NEAREST)


def save_grid(images, rows, path, scale=2, class_names=None):
    """Saves a grid of uint8 images as a PNG, upscaled `scale` times with nearest neighbour; with
    class_names (one per row), each row is labelled in a left margin. Returns the grid as saved (unscaled)."""
    grid = make_grid(images, rows)
    if class_names is not None:
        grid = label_rows(grid, class_names)
    write_atomically(path, png(grid_picture(grid, scale)))
    return grid


def png(picture):
    """A PIL image as the bytes of a PNG file."""
    buffer = io.BytesIO()
    picture.save(buffer, format="PNG")
    return buffer.getvalue()
