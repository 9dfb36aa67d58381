"""Doodles: ten classes of hand-drawn-looking 28x28 strokes in Quick-Draw's style, generated offline from a seed."""

from __future__ import annotations

import numpy as np
from PIL import Image, ImageDraw

from acgan.data import generated

CLASS_NAMES = (
    "circle",
    "square",
    "triangle",
    "star",
    "plus",
    "zigzag",
    "spiral",
    "heart",
    "arrow",
    "house",
)
PER_CLASS = {"train": 2000, "test": 500}
SIZE = 28
OVERSAMPLE = (
    4  # draw at 4x and box-downsample: that gives the soft stroke edges Quick-Draw bitmaps have
)
VERSION = 1  # bump whenever the drawing changes, so cached arrays from older code are never reused
# The full train split takes ~5 s to draw on a 2-core machine, so full splits are cached as .npz under
# data_dir/doodles/; capped loads are a prefix of the full split (images are drawn class-interleaved).
# DOODLES, at the end of the module, loads, caches and generates them (generated.GeneratedSet).


def _draw(name: str, rng: np.random.Generator) -> np.ndarray:
    """One [28, 28, 1] uint8 doodle of class `name`."""
    canvas = SIZE * OVERSAMPLE
    # One draw for all per-image scalars: cheaper than many tiny rng calls.
    angle, aspect, width, fill, dx, dy, shake = rng.uniform(
        (-20, 0.8, 1.3, 0.65, -0.06, -0.06, 0.015), (20, 1.25, 2.3, 0.92, 0.06, 0.06, 0.05)
    )
    c, s = np.cos(np.deg2rad(angle)), np.sin(np.deg2rad(angle))
    rot = np.array(
        [[c * aspect, s * aspect], [-s, c]]
    )  # aspect stretch, then rotation, as one matrix
    strokes = [_by_hand(stroke, rng, shake) @ rot for stroke in _SHAPES[name](rng)]

    # Like Quick-Draw's preprocessing: centre the drawing and scale its longer side to fill most of the frame.
    pts = np.concatenate(strokes)
    lo, hi = pts.min(0), pts.max(0)
    width *= OVERSAMPLE
    scale = fill * (canvas - 2 * width) / max(hi - lo) * np.array([1, -1])  # image y points down
    centre = canvas * np.array([0.5 + dx, 0.5 + dy]) - (lo + hi) / 2 * scale

    img = Image.new("L", (canvas, canvas), 0)
    draw = ImageDraw.Draw(img)
    r = width / 2
    for stroke in strokes:
        px = stroke * scale + centre
        draw.line(px.ravel().tolist(), fill=255, width=int(round(width)))
        for x, y in (px[0], px[-1]):  # round pen caps
            draw.ellipse((x - r, y - r, x + r, y + r), fill=255)
    return np.asarray(img.reduce(OVERSAMPLE))[..., None]


def _by_hand(
    stroke: np.ndarray, rng: np.random.Generator, shake: float, step: float = 0.08
) -> np.ndarray:
    """Jitter the ideal vertices, resample densely, then add low-frequency drift (a shaky hand) and tremor."""
    v = stroke + rng.normal(0, 0.05, stroke.shape)
    dist = np.concatenate(([0.0], np.cumsum(np.hypot(*np.diff(v, axis=0).T))))
    m = int(dist[-1] / step) + 2
    t = np.arange(m) * (dist[-1] / (m - 1))
    k = m // 8 + 2
    ctrl = rng.normal(0, shake, (k, 2))
    u = np.arange(m) * ((k - 1) / (m - 1))
    xy = np.array([np.interp(t, dist, v[:, 0]), np.interp(t, dist, v[:, 1])]).T
    drift = np.array(
        [np.interp(u, np.arange(k), ctrl[:, 0]), np.interp(u, np.arange(k), ctrl[:, 1])]
    ).T
    return xy + drift + rng.normal(0, 0.006, (m, 2))


def _poly(*pts) -> np.ndarray:
    return np.array(pts, dtype=np.float64)


def _circle(rng):
    start = rng.uniform(0, 2 * np.pi)
    t = start + np.linspace(0, 2 * np.pi + rng.uniform(0, 0.5), 24)
    return [np.stack([np.cos(t), np.sin(t)], axis=1)]


def _square(rng):
    return [_poly((-1, 1), (-1, -1), (1, -1), (1, 1), (-1, 1))]


def _triangle(rng):
    return [_poly((0, 1), (-1, -0.8), (1, -0.8), (0, 1))]


def _star(rng):
    # A pentagram drawn in one stroke, the way people doodle stars.
    t = np.pi / 2 + np.arange(6) * 4 * np.pi / 5
    return [np.stack([np.cos(t), np.sin(t)], axis=1)]


def _plus(rng):
    return [_poly((-1, 0), (1, 0)), _poly((0, 1), (0, -1))]


def _zigzag(rng):
    k = rng.integers(4, 7)
    x = np.linspace(-1, 1, k + 1)
    y = np.where(np.arange(k + 1) % 2 == 0, -1.0, 1.0) * rng.uniform(0.35, 0.6)
    return [np.stack([x, y], axis=1)]


def _spiral(rng):
    t = np.linspace(0, 2 * np.pi * rng.uniform(2.2, 3.0), 60)
    r = t / t[-1]
    phase = rng.uniform(0, 2 * np.pi)
    return [np.stack([r * np.cos(t + phase), r * np.sin(t + phase)], axis=1)]


def _heart(rng):
    t = np.linspace(0, 2 * np.pi, 40)
    x = 16 * np.sin(t) ** 3
    y = 13 * np.cos(t) - 5 * np.cos(2 * t) - 2 * np.cos(3 * t) - np.cos(4 * t)
    return [np.stack([x, y + 3], axis=1) / 16]


def _arrow(rng):
    h = rng.uniform(0.35, 0.55)
    return [_poly((-1, 0), (1, 0)), _poly((1 - h, h), (1, 0), (1 - h, -h))]


def _house(rng):
    walls = _poly((-0.7, 0.1), (-0.7, -1), (0.7, -1), (0.7, 0.1), (-0.7, 0.1))
    return [walls, _poly((-0.9, 0.05), (0, 1), (0.9, 0.05))]


_SHAPES = {
    "circle": _circle,
    "square": _square,
    "triangle": _triangle,
    "star": _star,
    "plus": _plus,
    "zigzag": _zigzag,
    "spiral": _spiral,
    "heart": _heart,
    "arrow": _arrow,
    "house": _house,
}

DOODLES = generated.GeneratedSet("doodles", VERSION, CLASS_NAMES, PER_CLASS, (SIZE, SIZE, 1), _draw)
