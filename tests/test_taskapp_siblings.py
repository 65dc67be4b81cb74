"""`load_sibling`: a task app's helper file, loaded by path, is one module however many files ask for it, and a
helper that fails to import is not left half-loaded for the next caller."""

from __future__ import annotations

from pathlib import Path

import pytest

from synth_ai.taskapp.siblings import load_sibling


def test_every_file_of_an_app_gets_the_same_sibling_module(tmp_path: Path):
    (tmp_path / "helper.py").write_text("STATE = []\n")
    first = load_sibling(tmp_path / "app.py", "helper")
    first.STATE.append("seen")
    again = load_sibling(str(tmp_path / "other.py"), "helper")
    assert again is first and again.STATE == ["seen"]


def test_a_sibling_that_fails_to_import_is_tried_again(tmp_path: Path):
    helper = tmp_path / "broken.py"
    helper.write_text("raise RuntimeError('not yet')\n")
    with pytest.raises(RuntimeError, match="not yet"):
        load_sibling(tmp_path / "app.py", "broken")
    helper.write_text("READY = True\n")
    assert load_sibling(tmp_path / "app.py", "broken").READY is True
