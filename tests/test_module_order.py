"""The order test.sh's workers take modules in (tests/module_order.py): the longest first, the modules that need
the reference venv after some minutes of others, and the seconds read back from a JUnit XML."""

from __future__ import annotations

from pathlib import Path

from module_order import NEW_MODULE_S, REFERENCE_AFTER_S, order_modules, seconds_from_junit


def test_the_longest_modules_go_first_and_unknown_ones_count_as_new() -> None:
    seconds = {"tests/test_a.py": 5.0, "tests/test_b.py": 300.0, "tests/test_c.py": NEW_MODULE_S + 1}
    order = order_modules(["tests/test_a.py", "tests/test_new.py", "tests/test_b.py", "tests/test_c.py"], seconds,
                          set(), workers=2)
    assert order == ["tests/test_b.py", "tests/test_c.py", "tests/test_new.py", "tests/test_a.py"]


def test_modules_needing_the_reference_venv_wait_for_enough_other_work() -> None:
    per_worker = REFERENCE_AFTER_S
    seconds = {"tests/test_ref.py": 1000.0, "tests/test_x.py": per_worker, "tests/test_y.py": per_worker,
               "tests/test_z.py": 1.0}
    order = order_modules(list(seconds), seconds, {"tests/test_ref.py"}, workers=2)
    assert order == ["tests/test_x.py", "tests/test_y.py", "tests/test_ref.py", "tests/test_z.py"]
    # with too little other work, they come last
    assert order_modules(["tests/test_ref.py", "tests/test_z.py"], seconds, {"tests/test_ref.py"},
                         workers=2) == ["tests/test_z.py", "tests/test_ref.py"]


def test_seconds_per_module_from_junit(tmp_path: Path) -> None:
    xml = tmp_path / "run.xml"
    xml.write_text('<testsuites><testsuite>'
                   '<testcase classname="tests.test_a" name="t1" time="1.5"/>'
                   '<testcase classname="tests.test_a" name="t2" time="2.0"/>'
                   '<testcase classname="tests.reliability.test_b.TestK" name="t" time="4"/>'
                   '</testsuite></testsuites>')
    assert seconds_from_junit(xml) == {"tests/test_a.py": 3.5, "tests/reliability/test_b.py": 4.0}
