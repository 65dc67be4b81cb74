"""Small PNG line charts (SFT loss, RL reward per iteration) drawn with Pillow, so the report needs no plotting
library. Pillow comes with the training extra, which the demo needs anyway."""

from __future__ import annotations

from pathlib import Path

WIDTH, HEIGHT = 640, 360
MARGIN_LEFT, MARGIN_RIGHT, MARGIN_TOP, MARGIN_BOTTOM = 64, 20, 40, 44
LINE = (37, 99, 235)
AXIS = (90, 90, 90)
GRID = (225, 225, 225)


def line_chart(points: list[tuple[float, float]], path: Path, *, title: str, x_label: str, y_label: str) -> Path | None:
    """Write a PNG of `points` (x, y) to `path`; None when there is nothing to draw or no Pillow."""
    try:
        from PIL import Image, ImageDraw
    except ImportError:
        return None
    points = sorted((float(x), float(y)) for x, y in points)
    if not points:
        return None
    image = Image.new("RGB", (WIDTH, HEIGHT), "white")
    draw = ImageDraw.Draw(image)
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    x_lo, x_hi = min(xs), max(xs)
    y_lo, y_hi = min(ys), max(ys)
    if y_hi - y_lo < 1e-9:  # a flat line still needs a visible band
        y_lo, y_hi = y_lo - 0.5, y_hi + 0.5
    if x_hi - x_lo < 1e-9:
        x_lo, x_hi = x_lo - 1, x_hi + 1
    left, right = MARGIN_LEFT, WIDTH - MARGIN_RIGHT
    top, bottom = MARGIN_TOP, HEIGHT - MARGIN_BOTTOM

    def at(x: float, y: float) -> tuple[float, float]:
        return (left + (x - x_lo) / (x_hi - x_lo) * (right - left),
                bottom - (y - y_lo) / (y_hi - y_lo) * (bottom - top))

    for i in range(5):  # horizontal grid with value labels
        value = y_lo + (y_hi - y_lo) * i / 4
        _, y = at(x_lo, value)
        draw.line([(left, y), (right, y)], fill=GRID)
        draw.text((6, y - 6), f"{value:.3g}", fill=AXIS)
    draw.line([(left, top), (left, bottom), (right, bottom)], fill=AXIS, width=1)
    draw.text((left, bottom + 6), f"{x_lo:g}", fill=AXIS)
    draw.text((right - 30, bottom + 6), f"{x_hi:g}", fill=AXIS)
    draw.text(((left + right) // 2 - 3 * len(x_label), bottom + 22), x_label, fill=AXIS)
    draw.text((left, 12), f"{title}  ({y_label})", fill=(20, 20, 20))
    pixels = [at(x, y) for x, y in points]
    if len(pixels) > 1:
        draw.line(pixels, fill=LINE, width=2)
    for x, y in pixels:
        draw.ellipse([x - 3, y - 3, x + 3, y + 3], fill=LINE)
    path.parent.mkdir(parents=True, exist_ok=True)
    image.save(path, format="PNG")
    return path
