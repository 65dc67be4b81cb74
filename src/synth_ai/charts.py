"""PNG line charts drawn with Pillow, so neither the demo's report nor `jobs metrics --plot` needs a plotting library:
one chart (`line_chart`), or a stack of panels with one or more series each (`panels_chart`). Pillow comes with the
`train` extra."""

from __future__ import annotations

from pathlib import Path
from typing import Any

WIDTH, HEIGHT = 640, 360
MARGIN_LEFT, MARGIN_RIGHT, MARGIN_TOP, MARGIN_BOTTOM = 64, 20, 40, 44
COLOURS = [(37, 99, 235), (220, 38, 38), (22, 163, 74), (147, 51, 234)]
LINE = COLOURS[0]
AXIS = (90, 90, 90)
GRID = (225, 225, 225)

Points = list[tuple[float, float]]


def pillow_available() -> bool:
    try:
        import PIL  # noqa: F401
    except ImportError:
        return False
    return True


def line_chart(points: Points, path: Path, *, title: str, x_label: str, y_label: str) -> Path | None:
    """Write a PNG of `points` (x, y) to `path`; None when there is nothing to draw or no Pillow."""
    return panels_chart([(f"{title}  ({y_label})", {y_label: points})], path, x_label=x_label)


def panels_chart(panels: list[tuple[str, dict[str, Points]]], path: Path, *, x_label: str) -> Path | None:
    """Write a PNG with one panel per `(title, {series name: points})`, stacked; panels without points are left out.
    None when there is nothing to draw or no Pillow."""
    if not pillow_available():
        return None
    from PIL import Image, ImageDraw

    panels = [(title, {name: sorted((float(x), float(y)) for x, y in pts) for name, pts in series.items() if pts})
              for title, series in panels]
    panels = [(title, series) for title, series in panels if series]
    if not panels:
        return None
    image = Image.new("RGB", (WIDTH, HEIGHT * len(panels)), "white")
    draw = ImageDraw.Draw(image)
    for index, (title, series) in enumerate(panels):
        _panel(draw, index * HEIGHT, title, series, x_label)
    path.parent.mkdir(parents=True, exist_ok=True)
    image.save(path, format="PNG")
    return path


def _panel(draw: Any, offset: int, title: str, series: dict[str, Points], x_label: str) -> None:
    everything = [p for pts in series.values() for p in pts]
    xs, ys = [p[0] for p in everything], [p[1] for p in everything]
    x_lo, x_hi = min(xs), max(xs)
    y_lo, y_hi = min(ys), max(ys)
    if y_hi - y_lo < 1e-12 * max(1.0, abs(y_hi)):  # a flat line still needs a visible band
        pad = abs(y_hi) * 0.1 or 0.5
        y_lo, y_hi = y_lo - pad, y_hi + pad
    if x_hi - x_lo < 1e-9:
        x_lo, x_hi = x_lo - 1, x_hi + 1
    left, right = MARGIN_LEFT, WIDTH - MARGIN_RIGHT
    top, bottom = offset + MARGIN_TOP, offset + HEIGHT - MARGIN_BOTTOM

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
    draw.text((left, offset + 12), title, fill=(20, 20, 20))
    legend_x = right
    for number, (name, points) in enumerate(series.items()):
        colour = COLOURS[number % len(COLOURS)]
        pixels = [at(x, y) for x, y in points]
        if len(pixels) > 1:
            draw.line(pixels, fill=colour, width=2)
        for x, y in pixels:
            draw.ellipse([x - 3, y - 3, x + 3, y + 3], fill=colour)
        if len(series) > 1:  # a legend, right-aligned on the title line
            legend_x -= 6 * len(name) + 24
            draw.rectangle([legend_x, offset + 14, legend_x + 10, offset + 22], fill=colour)
            draw.text((legend_x + 14, offset + 12), name, fill=AXIS)


# `jobs metrics --plot`: which metrics share a panel (SFT writes train.loss/val.loss/learning_rate; RL loss,
# reward.mean and eval.mean_return).
JOB_PANELS = (("loss", ("train.loss", "val.loss", "loss")), ("learning rate", ("learning_rate",)),
              ("mean reward", ("reward.mean",)), ("eval mean return", ("eval.mean_return",)))


def job_metrics_chart(points: list[dict[str, Any]], path: Path) -> Path | None:
    """Loss, learning rate, reward and eval curves of a job's metric points (`{name, step, value}`) as one PNG."""
    by_name: dict[str, Points] = {}
    for point in points:
        if isinstance(point.get("step"), int) and isinstance(point.get("value"), (int, float)):
            by_name.setdefault(str(point.get("name")), []).append((point["step"], point["value"]))
    panels = [(title, {name: by_name[name] for name in names if name in by_name}) for title, names in JOB_PANELS]
    return panels_chart(panels, path, x_label="step")
