"""Server-side checks of job create bodies (`POST /learning/jobs`, `POST /rl/jobs`).

The client validates configs before sending; the backend checks again because anything can call it (curl, the
reference client, an old client). The config parts of a body (SFT `hyperparameters` and
`metadata.effective_config`, RL `data.config`) are held to the config models' own rules, so a key's type and bounds
are written once, in `synth_ai.config`. Messages follow the reference's wording where it had one (§2.4).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import BaseModel

from synth_ai.backend.http_errors import ApiError
from synth_ai.config.job_parts import ConfigKeyError, KeyNamer, check_part, dotted_key, given, toml_key
from synth_ai.config.rl_schema import RLConfig
from synth_ai.config.sft_schema import STEP_KEYS, HyperparametersSection, SFTConfig
from synth_ai.errors import SynthError

RL_JOB_TYPE = "rl"  # the wire format's `job_type` of an RL create body (reference §2.2)
RL_TRAINING_MODE = "rl"  # the model registry's training mode an RL job needs


def _invalid(message: str, *, hint: str | None = None, field: str | None = None) -> ApiError:
    return ApiError(400, "invalid_job", message, hint=hint, details={"field": field} if field else None)


def _config_part(model: type[BaseModel], data: Any, name: KeyNamer, field: str) -> Any:
    """`data` checked by the config model's rules (`synth_ai.config.job_parts`): a refused value is a 400 that
    names the key, in the words `synth-ai config validate` uses for it."""
    try:
        return check_part(model, data, name)
    except ConfigKeyError as exc:
        where = ".".join([field, *(str(p) for p in exc.path)])
        raise _invalid(exc.message, field=where) from None


def check_hyperparameters(hyper: Any) -> dict[str, Any]:
    if not isinstance(hyper, dict) or not hyper:
        raise _invalid("hyperparameters must not be empty", field="hyperparameters",
                       hint='Send e.g. "hyperparameters": {"n_epochs": 1}.')
    if not any(k in hyper for k in STEP_KEYS):
        raise _invalid(f"hyperparameters must include at least one of: {', '.join(STEP_KEYS)}",
                       field="hyperparameters")
    checked = _config_part(HyperparametersSection, hyper, dotted_key("hyperparameters"), "hyperparameters")
    return {**hyper, **given(checked)}


def resolve_model_id(model: Any, *, mode: str, allow_fine_tuned: bool, field: str) -> tuple[str, str]:
    """(canonical id, base id) from the registry; 400 naming the field when unknown or not trainable that way."""
    from synth_ai.models.registry import check_trainable, resolve_model

    if not isinstance(model, str) or not model.strip():
        raise _invalid(f"{field} is required (a model id such as 'Qwen/Qwen3-4B' or 'synth-ai/tiny-qwen3')",
                       field=field)
    try:
        resolved = resolve_model(model, allow_fine_tuned=allow_fine_tuned)
        check_trainable(resolved, mode, allow_experimental=True)
    except SynthError as exc:
        raise ApiError(400, "invalid_model", exc.message, hint=exc.hint, details={"field": field}) from None
    return resolved.canonical, resolved.base.id


def sft_file_ids(body: dict[str, Any]) -> tuple[str, list[str]]:
    """(training file id, validation file ids) named by an SFT create body."""
    training = body.get("training_file_id") or body.get("training_file")
    if not isinstance(training, str) or not training.strip():
        raise _invalid("training file identifier is required for SFT jobs", field="training_file_id",
                       hint="Upload the dataset with POST /api/files (purpose=fine-tune) and pass its id as "
                            "training_file_id.")
    validation: list[str] = []
    for value in (body.get("validation_file_id"), body.get("validation_file")):
        if isinstance(value, str) and value.strip():
            validation.append(value.strip())
    effective = ((body.get("metadata") or {}).get("effective_config") or {})
    files = ((effective.get("data") or {}).get("validation_files")) if isinstance(effective, dict) else None
    if isinstance(files, list):
        validation.extend(str(f) for f in files if isinstance(f, str) and f.strip())
    unique: list[str] = []
    for file_id in validation:
        if file_id not in unique:
            unique.append(file_id)
    return training.strip(), unique


def check_sft_body(body: Any, *, known_fine_tuned: Callable[[str], bool] | None = None) -> dict[str, Any]:
    """`known_fine_tuned(id)`: whether a fine-tuned id (`ft:`/`rl:`) is a model of this backend, which SFT may
    continue from; any other fine-tuned id is refused as in the reference (a base model is required)."""
    if not isinstance(body, dict):
        raise _invalid("The request body must be a JSON object (the SFT job payload).")
    raw = body.get("model")
    own = bool(known_fine_tuned and isinstance(raw, str) and raw.strip() and known_fine_tuned(raw.strip()))
    model, _base = resolve_model_id(raw, mode="sft", allow_fine_tuned=own, field="model")
    clean = dict(body)
    clean["model"] = model
    clean["hyperparameters"] = check_hyperparameters(body.get("hyperparameters"))
    clean.setdefault("training_type", "sft_offline")
    if clean.get("metadata") is not None and not isinstance(clean["metadata"], dict):
        raise _invalid("metadata must be a JSON object", field="metadata")
    effective = (clean.get("metadata") or {}).get("effective_config")
    _config_part(SFTConfig, effective, toml_key, "metadata.effective_config")
    return clean


def check_rl_body(body: Any) -> dict[str, Any]:
    """Validate an RL create body (reference §2.2 payload); returns it with the model canonicalised."""
    if not isinstance(body, dict):
        raise _invalid("The request body must be a JSON object (the RL job payload).")
    job_type = body.get("job_type", RL_JOB_TYPE)
    if job_type != RL_JOB_TYPE:
        raise _invalid(f"job_type must be {RL_JOB_TYPE!r} for POST /rl/jobs (found {job_type!r})", field="job_type")
    data = body.get("data")
    if not isinstance(data, dict):
        raise _invalid("data is required: {endpoint_base_url, config, base_model | model}", field="data")
    url = data.get("endpoint_base_url")
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        raise _invalid(f"data.endpoint_base_url must be the task app's http(s) URL (found {url!r})",
                       field="data.endpoint_base_url")
    config = data.get("config")
    if not isinstance(config, dict):
        raise _invalid("data.config must be the RL config as a JSON object", field="data.config")
    _config_part(RLConfig, config, toml_key, "data.config")
    has_base, has_source = bool(data.get("base_model")), bool(data.get("model"))
    if has_base == has_source:
        raise _invalid("data must name exactly one of base_model (a base model) or model (a fine-tuned source)",
                       field="data.base_model")
    field = "data.base_model" if has_base else "data.model"
    named = str(data.get("base_model") or data.get("model")).strip()
    table = next((config[t] for t in ("model", "policy") if isinstance(config.get(t), dict)), {})
    source = table.get("source")
    if isinstance(source, str) and source.strip() and source.strip().lower() != named.lower():
        # the worker starts from the body's model: a config asking for another would be ignored without a word
        raise _invalid(f"data.config.model.source is {source.strip()!r} but {field} is {named!r}; the job would "
                       f"start from {named!r}", hint=f"Send data.model = {source.strip()!r} (as `synth-ai train "
                       "--type rl` does), or drop [model].source from the config.", field="data.config.model.source")
    model, _base = resolve_model_id(data.get("base_model") or data.get("model"), mode=RL_TRAINING_MODE,
                                    allow_fine_tuned=has_source, field=field)
    algorithm = config.get("algorithm") or {}
    if isinstance(algorithm, dict) and algorithm:
        combo = (algorithm.get("type"), algorithm.get("method"), algorithm.get("variety"))
        if combo[0] not in (None, "online") or combo[2] not in (None, "gspo"):
            raise _invalid(f"data.config.algorithm must be type=online, variety=gspo for RL (found "
                           f"type={combo[0]!r}, variety={combo[2]!r})", field="data.config.algorithm")
    clean = dict(body)
    clean["data"] = {**data, "endpoint_base_url": url.rstrip("/"),
                     ("base_model" if has_base else "model"): model}
    return clean
