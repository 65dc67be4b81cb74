"""The one rule RL and eval share (`synth_ai.taskapp.reachability`): what counts as a task app that is away, and
the bounded wait for it. The waits against real servers: tests/test_rl_taskapp_outage.py,
tests/test_eval_taskapp_outage.py."""

from __future__ import annotations

import asyncio

import httpx

from synth_ai.loopback_http import LoopbackTimeout, LoopbackUnreachable
from synth_ai.taskapp.reachability import TaskAppOutage, WaitStopped, unreachable_answer, unreachable_error


def test_what_counts_as_unreachable() -> None:
    """No connection, or a gateway's 502/503/504; never an answer of the app's own, nor a read timeout."""
    request = httpx.Request("POST", "http://127.0.0.1:9/rollout")
    for outage in (httpx.ConnectError("refused", request=request), httpx.ConnectTimeout("slow", request=request),
                   httpx.ReadError("reset by peer", request=request),
                   httpx.RemoteProtocolError("Server disconnected without sending a response", request=request),
                   LoopbackUnreachable("ConnectionRefusedError: refused"), ConnectionResetError("reset")):
        assert unreachable_error(outage), outage
    for other in (httpx.ReadTimeout("slow app", request=request), LoopbackTimeout("slow app"), ValueError("x"),
                  httpx.UnsupportedProtocol("ftp", request=request)):
        assert unreachable_error(other) is None, other
    assert "HTTP 502 from a gateway" in unreachable_answer(502, "<html><h1>502 Bad Gateway</h1></html>")
    assert unreachable_answer(503, "") and unreachable_answer(504, '{"message": "upstream timed out"}')
    coded = '{"detail": {"error": {"code": "%s", "message": "m"}}}'
    for status, code in ((502, "inference_failed"), (504, "inference_timeout"), (503, "missing_environment_api_key")):
        assert unreachable_answer(status, coded % code) is None  # the app itself answered
    for status in (200, 400, 401, 403, 404, 422, 429, 500):
        assert unreachable_answer(status, "<html>no</html>") is None


def test_an_app_that_answers_its_health_check_but_nothing_else_still_runs_out_the_window() -> None:
    """Each failure after the app answered a probe continues the same outage: the caller gives up once the window
    is spent, with the request's own reason, instead of going round for ever."""
    outage = TaskAppOutage("http://app", 1.0, probe=_answers)
    announced, rounds = 0, 0

    async def caller() -> bool:
        nonlocal announced, rounds
        while True:
            rounds += 1
            announced += outage.begin("HTTP 503 from a gateway in front of the task app: 'busy'")
            if not await outage.wait():
                return False

    assert asyncio.run(caller()) is False
    assert outage.gave_up and rounds >= 2 and announced == rounds  # the first failure, and each after an answer
    assert "could not be reached" in outage.give_up_reason("[eval].task_app_wait_s")
    assert outage.give_up_reason("k").endswith("HTTP 503 from a gateway in front of the task app: 'busy'")
    assert outage.end() is not None and not outage.gave_up and outage.since is None  # a request got through


def test_waiters_share_one_outage_and_one_of_them_tells() -> None:
    """Seeds in flight together: one announces the wait, all go on once the app is back, one says so."""
    probes: list[int] = []

    async def app_back_on_third_probe() -> str | None:
        probes.append(1)
        return None if len(probes) >= 3 else "ConnectError: refused"

    outage = TaskAppOutage("http://app", 60.0, probe=app_back_on_third_probe)

    async def seed() -> tuple[bool, bool, bool]:
        announce = outage.begin("ConnectError: refused")
        back = await outage.wait()
        return announce, back, outage.tell_back()

    async def all_seeds() -> list[tuple[bool, bool, bool]]:
        return await asyncio.gather(*(seed() for _ in range(4)))

    results = asyncio.run(all_seeds())
    assert [r[0] for r in results].count(True) == 1
    assert all(r[1] for r in results) and [r[2] for r in results].count(True) == 1
    assert len(probes) == 3  # one prober; the others found the app already back


def test_a_stop_ends_the_wait() -> None:
    outage = TaskAppOutage("http://app", 60.0, probe=_away)
    outage.begin("ConnectError: refused")
    checks: list[int] = []
    try:
        asyncio.run(outage.wait(should_stop=lambda: checks.append(1) or len(checks) > 3))
    except WaitStopped:
        pass
    else:
        raise AssertionError("the wait went on after should_stop() said stop")
    assert not outage.gave_up


async def _answers() -> str | None:
    return None


async def _away() -> str | None:
    return "ConnectError: refused"
