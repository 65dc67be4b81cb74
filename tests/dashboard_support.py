"""Helpers for the dashboard browser test: finding Debian's chromium for Playwright, an eval trace database with a
picture, and where screenshots go."""

from __future__ import annotations

import base64
import io
import os
import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
HOSTILE = '<img src="x" id="pwned"><script>document.title = "pwned"</script>'


def chromium_path() -> str:
    """Debian's chromium (`scripts/install_chromium.sh`; Playwright's own browser downloads are blocked here).
    CI sets SYNTH_REQUIRE_BROWSER=1, so there a missing browser fails instead of skipping."""
    found = os.environ.get("SYNTH_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    missing = None
    if not found:
        missing = "no chromium on PATH (run scripts/install_chromium.sh)"
    else:
        try:
            import playwright.sync_api  # noqa: F401
        except ImportError:
            missing = "playwright is not installed (pip install -e '.[dev]')"
    if missing:
        if os.environ.get("SYNTH_REQUIRE_BROWSER") == "1":
            pytest.fail(f"the dashboard browser test needs a browser: {missing}")
        pytest.skip(f"dashboard browser test: {missing}")
    return str(found)


def artifacts_dir() -> Path:
    folder = Path(os.environ.get("SYNTH_TEST_ARTIFACTS", REPO / "test-artifacts")) / "dashboard"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _square_png(rgb: tuple[int, int, int]) -> str:
    from PIL import Image

    image = Image.new("RGB", (24, 24), (255, 255, 255))
    image.paste(rgb, (4, 4, 20, 20))
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def write_eval_traces(path: Path, run_id: str = "eval_dashboard") -> Path:
    """Three seeds of a Qwen3-VL eval run as `synth-ai eval` stores them: a picture in the user turn, a score per
    seed; seed 2's answer is hostile markup that must show as text."""
    from synth_ai.tracing.session import SessionRecorder
    from synth_ai.tracing.store import TraceStore

    with TraceStore(path) as store:
        for seed, (colour, rgb, score) in enumerate((("red", (220, 30, 30), 1.0), ("green", (30, 200, 60), 0.0),
                                                     ("blue", (30, 60, 220), 0.5))):
            rec = SessionRecorder(metadata={"eval_run_id": run_id, "eval_seed": seed, "official_score": score,
                                            "model": "synth-ai/tiny-qwen3-vl", "app_id": "colours",
                                            "task_id": f"colours:{seed}"})
            rec.message("user", {"role": "user", "content": [
                {"type": "image_url", "image_url": {"url": _square_png(rgb)}},
                {"type": "text", "text": "Which colour is the square?"}]})
            answer = HOSTILE if seed == 2 else f"The square is {colour}."
            rec.message("assistant", {"role": "assistant", "content": answer})
            rec.set_outcome(score)
            store.write(rec)
    return path
