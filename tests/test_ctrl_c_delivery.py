"""What the `ctrl_c_delivered` fixture gives a Ctrl-C test: a SIGINT to the test's own process raises
KeyboardInterrupt, and a child process it starts gets Python's KeyboardInterrupt too. tests/test_test_script.py runs
this module in a pytest started with SIGINT ignored, as a background job of a non-interactive shell starts."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

_CHILD = """
import sys, time
try:  # "ready" inside the try: a SIGINT right after it must land here too
    print("ready", flush=True)
    time.sleep(60)
except KeyboardInterrupt:
    sys.exit(42)
sys.exit(0)
"""


@pytest.mark.usefixtures("ctrl_c_delivered")
def test_a_sigint_to_the_test_raises_keyboard_interrupt():
    with pytest.raises(KeyboardInterrupt):
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(10)  # an ignored SIGINT lets this run out, and the raises() fails


@pytest.mark.usefixtures("ctrl_c_delivered")
def test_a_child_started_by_the_test_gets_keyboard_interrupt():
    child = subprocess.Popen([sys.executable, "-c", _CHILD], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "ready"
        child.send_signal(signal.SIGINT)
        assert child.wait(timeout=30) == 42
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
