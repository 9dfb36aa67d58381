"""Swatches: ten classes of 32x32 colour textures (fabric and wallpaper swatches), generated offline from a seed.

A development aid for colour models, the way doodles is for 28x28 strokes; not evidence of quality on
natural images (CIFAR-10 stays the real target). What makes it hard for a generator:

- the class is the *texture* (stripes, checks, dots, rings, waves, bricks, clouds, gradient, plaid,
  confetti), and every image draws its colours from the whole hue circle, so one class holds every
  colour, every orientation, scale and phase: a generator that collapses to one swatch per class
  (one colour, one angle) is far from the class's real spread, which the per-class Fréchet distance sees;
- periods of 4-10 pixels at any angle: a 4x4 stride-2 transposed convolution's own checkerboard is at
  the same scale, and smooth blur cannot pass for a stripe;
- smooth classes (clouds, gradient) sit beside sharp ones, and pixel noise on every image.

20,000 train / 5,000 test images (2,000 / 500 per class) from independent seed streams; ~10 s to make
on a 2-core machine, cached as .npz under data_dir/swatches/.
"""

from __future__ import annotations

import colorsys

import numpy as np
from PIL import Image

from acgan.data import generated

CLASS_NAMES = (
    "stripes",
    "checks",
    "dots",
    "rings",
    "waves",
    "bricks",
    "clouds",
    "gradient",
    "plaid",
    "confetti",
)
PER_CLASS = {"train": 2000, "test": 500}
SIZE = 32
VERSION = 3  # bump whenever the drawing changes, so cached arrays from older code are never reused
NOISE = 6.0  # std of the per-pixel noise, in uint8 levels
_Y, _X = np.mgrid[0:SIZE, 0:SIZE].astype(np.float64) - (SIZE - 1) / 2.0
# SWATCHES, at the end of the module, loads, caches and generates them (generated.GeneratedSet).


def _swatch(name, rng):
    """One [32, 32, 3] uint8 swatch of class `name`: its pattern, then pixel noise."""
    rgb = _DRAW[name](rng)
    rgb = rgb * 255.0 + rng.normal(0.0, NOISE, rgb.shape)
    return np.clip(np.rint(rgb), 0, 255).astype(np.uint8)


# ---- Drawing: each class is a mask field m in [0, 1] over the pixel grid, mixed between colours ----


def _colour(rng, hue=None):
    hue = rng.uniform() if hue is None else hue % 1.0
    return np.array(colorsys.hsv_to_rgb(hue, rng.uniform(0.45, 1.0), rng.uniform(0.35, 1.0)))


def _two_colours(rng):
    """Two colours from opposite-ish sides of the hue circle, one darker: the pattern stays visible."""
    hue = rng.uniform()
    a, b = _colour(rng, hue), _colour(rng, hue + rng.uniform(0.25, 0.75))
    if a.mean() < b.mean():
        a, b = b, a
    return a, b * rng.uniform(0.35, 0.8)


def _mix(mask, a, b):
    return mask[..., None] * a + (1.0 - mask[..., None]) * b


def _rotated(rng, angle=None):
    """Coordinates (u, v) of the grid rotated by a random (or the given) angle, shifted at random."""
    t = rng.uniform(0, np.pi) if angle is None else angle
    c, s = np.cos(t), np.sin(t)
    du, dv = rng.uniform(-16, 16, 2)
    return c * _X + s * _Y + du, -s * _X + c * _Y + dv


def _soft(x, sharp=3.0):
    """A square wave from a sine-like field, edges about a pixel wide."""
    return 0.5 + 0.5 * np.tanh(sharp * x)


def _stripes(rng):
    u, _ = _rotated(rng)
    return _mix(_soft(np.sin(2 * np.pi * u / rng.uniform(4, 10))), *_two_colours(rng))


def _checks(rng):
    u, v = _rotated(rng)
    cell = rng.uniform(4.5, 8)
    return _mix(
        _soft(4 * np.sin(np.pi * u / cell) * np.sin(np.pi * v / cell), 1.5), *_two_colours(rng)
    )


def _dots(rng):
    u, v = _rotated(rng)
    pitch = rng.uniform(6, 10)
    du, dv = (u % pitch) - pitch / 2, (v % pitch) - pitch / 2
    radius = rng.uniform(0.26, 0.4) * pitch
    return _mix(_soft(radius - np.hypot(du, dv), 1.5), *_two_colours(rng))


def _rings(rng):
    cx, cy = rng.uniform(-9, 9, 2)  # the centre in the picture: whole rings, not curved stripes
    r = np.hypot(_X - cx, _Y - cy)
    return _mix(
        _soft(np.sin(2 * np.pi * r / rng.uniform(4, 9) + rng.uniform(0, 2 * np.pi))),
        *_two_colours(rng),
    )


def _waves(rng):
    u, v = _rotated(rng)
    period = rng.uniform(5, 9)
    bend = (
        rng.uniform(0.6, 0.9)
        * period
        * np.sin(2 * np.pi * v / rng.uniform(9, 15) + rng.uniform(0, 2 * np.pi))
    )
    return _mix(_soft(np.sin(2 * np.pi * (u + bend) / period)), *_two_colours(rng))


def _bricks(rng):
    u, v = _rotated(rng, angle=rng.choice([0.0, np.pi / 2]) + rng.uniform(-0.2, 0.2))
    height = rng.uniform(5, 9)
    width = height * rng.uniform(1.8, 2.6)
    row = np.floor(v / height)
    across = (u + (row % 2) * width / 2) % width
    down = v % height
    gap = np.minimum(np.minimum(down, height - down), np.minimum(across, width - across))
    brick, mortar = _colour(rng), _colour(rng)
    mortar = 0.5 * mortar + 0.5 * (
        1.0 if brick.mean() < 0.5 else 0.1
    )  # mortar contrasts with the brick
    return _mix(_soft(gap - 0.8, 2.0), brick, mortar)


def _clouds(rng):
    k = int(rng.integers(4, 8))
    field = Image.fromarray(rng.normal(0, 1, (k, k)).astype(np.float32), mode="F").resize(
        (SIZE, SIZE), Image.BICUBIC
    )
    field = np.asarray(field, np.float64)
    field = (field - field.mean()) / (field.std() + 1e-6)
    return _mix(_soft(field, 1.2), *_two_colours(rng))


def _gradient(rng):
    u, _ = _rotated(rng)
    return _mix(np.clip(0.5 + u / rng.uniform(24, 48), 0, 1), *_two_colours(rng))


def _plaid(rng):
    u, v = _rotated(rng, angle=rng.uniform(-0.3, 0.3) + rng.choice([0.0, np.pi / 4]))
    hue = rng.uniform()
    base, a, b = _colour(rng, hue), _colour(rng, hue + 1 / 3), _colour(rng, hue + 2 / 3)
    ma = _soft(np.sin(2 * np.pi * u / rng.uniform(6, 11)), 3.0)
    mb = _soft(np.sin(2 * np.pi * v / rng.uniform(6, 11)), 3.0)
    return (
        base * (1 - 0.6 * ma[..., None] - 0.6 * mb[..., None])
        + 0.6 * ma[..., None] * a
        + 0.6 * mb[..., None] * b
    )


def _confetti(rng):
    background = _colour(rng) * rng.uniform(0.15, 0.4)
    rgb = np.broadcast_to(background, (SIZE, SIZE, 3)).copy()
    for _ in range(int(rng.integers(8, 16))):
        x, y = rng.integers(0, SIZE, 2)
        w, h = rng.integers(2, 5, 2)
        rgb[y : y + h, x : x + w] = _colour(rng) * rng.uniform(0.8, 1.25)
    return np.clip(rgb, 0, 1)


_DRAW = {
    "stripes": _stripes,
    "checks": _checks,
    "dots": _dots,
    "rings": _rings,
    "waves": _waves,
    "bricks": _bricks,
    "clouds": _clouds,
    "gradient": _gradient,
    "plaid": _plaid,
    "confetti": _confetti,
}

# Swatches are drawn from the seed (seed, stream, 32): changing it changes every image (bump VERSION).
SWATCHES = generated.GeneratedSet(
    "swatches", VERSION, CLASS_NAMES, PER_CLASS, (SIZE, SIZE, 3), _swatch, seed_salt=(32,)
)
