"""What a job that resumes in new workers says: the worker's last line read back as the attempt's reason, and the
final reason of a job that used all its attempts as one readable sentence (issue 37: "... while attempts are
left., and it has used all 3 attempts (attempt 1: attempt 1 ended: ...")."""

from __future__ import annotations

from vllm_support import require_vllm

from synth_ai.backend.jobs.process_contract import resume_line, resume_reason
from synth_ai.backend.jobs.scheduler import out_of_attempts

VLLM_CHECK = ("the vLLM engine failed while sampling: RuntimeError: cpu_attn_impl.hpp:1521: Check failed: "
              "input->metadata->thread_num == thread_num (2 vs. 1)")


def test_the_worker_line_is_read_back_as_the_reason_alone():
    line = resume_line(2, f"{VLLM_CHECK}.\n  (from the engine)\n")
    assert "\n" not in line
    reason = resume_reason(f"some log\n{line}\n")
    assert reason == f"{VLLM_CHECK}. (from the engine)"
    assert resume_reason("Traceback (most recent call last):\nRuntimeError: boom\n") is None
    assert resume_reason("") is None


def test_attempts_that_ended_alike_are_said_once():
    message = out_of_attempts(VLLM_CHECK + ".", [VLLM_CHECK, VLLM_CHECK + "."], 3)
    assert message == f"{VLLM_CHECK} (all 3 attempts ended this way)"
    assert message.count("Check failed") == 1 and "attempt 1" not in message and ".," not in message
    assert out_of_attempts("lost", ["lost"], 3) == "lost (2 of its 3 attempts ended this way)"


def test_attempts_that_ended_differently_are_each_named_once():
    message = out_of_attempts("the worker process was killed by signal 9 (SIGKILL)",
                              [VLLM_CHECK, "the backend restarted while it was running."], 3)
    assert message == ("it has used all 3 attempts (attempt 1: " + VLLM_CHECK + "; attempt 2: the backend "
                       "restarted while it was running; attempt 3: the worker process was killed by signal 9 "
                       "(SIGKILL))")
    assert "ended:" not in message


def test_one_attempt_or_no_earlier_reasons():
    assert out_of_attempts("the backend restarted while it was running", [], 1) == \
        "the backend restarted while it was running, and it has used its only attempt"
    assert out_of_attempts("the backend restarted while it was running", [], 3) == \
        "the backend restarted while it was running, and it has used all 3 attempts"


def test_vllms_error_is_one_line_without_its_log_prefix():
    require_vllm()
    from synth_ai.backend.inference.vllm_engine import failure_text

    raw = RuntimeError("[rank0]:[F1202 02:56:30.811392089 cpu_attn_impl.hpp:1521] Check failed: "
                       "input->metadata->thread_num == thread_num (2 vs. 1). \n")
    assert failure_text(raw) == ("RuntimeError: cpu_attn_impl.hpp:1521: Check failed: "
                                 "input->metadata->thread_num == thread_num (2 vs. 1)")
    assert failure_text(ValueError("plain\nwords.")) == "ValueError: plain words"

