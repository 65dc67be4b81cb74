"""The RL kind's `local_check` hook: at create time, refuse an RL job that this machine could not run, with the
reason and the fix (a 400 whose `details.code` names it), rather than a worker that fails minutes later: its vLLM
rollout engine (`engine_choice.refuse_unrunnable_here`) and its optimiser states (`trainers.optimizer`: the
library installed, a CUDA GPU for `cpu_offload`) and its sharding (`sharding_plan`: FSDP over 2 or more ranks that
share the batch evenly)."""

from __future__ import annotations

from typing import Any

from synth_ai.backend.trainers.optimizer import optimizer_refusal
from synth_ai.backend.trainers.rl.engine_choice import refuse_unrunnable_here as refuse_unrunnable_engine
from synth_ai.backend.trainers.rl.rl_settings import resolve_rl_settings
from synth_ai.backend.trainers.rl.sharding_plan import refuse_unrunnable_sharding
from synth_ai.config.job_specs import RLJobSpec
from synth_ai.errors import InvalidInputError, UnavailableError


def refuse_unrunnable_here(spec: RLJobSpec, model_store: Any, *, gpus: int, ranks: int = 1) -> None:
    refuse_unrunnable_engine(spec, model_store, gpus=gpus)
    settings = resolve_rl_settings(spec)
    try:
        refuse_unrunnable_sharding(settings.batch_size, bool(settings.fsdp), ranks, settings.optimizer_states)
    except InvalidInputError as exc:
        raise InvalidInputError(exc.message, hint=exc.hint, details={**exc.details, "code": "invalid_parallelism"}) \
            from None
    states = settings.optimizer_states
    refusal = optimizer_refusal(states, cuda=gpus > 0)
    if refusal is not None:
        message, fix = refusal
        raise UnavailableError(message, hint=fix, details={"field": "data.config.training.optimizer_states",
                                                           "code": "optimizer_unavailable"})
