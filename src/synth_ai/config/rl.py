"""RL (GSPO) config: the rules across keys of synth-ai 0.2.17's `RLConfig` (its sections are in
`synth_ai.config.rl_schema`), and the resolved form sent as `data.config` in `POST /rl/jobs`."""

from __future__ import annotations

import re
from typing import Any

from synth_ai.config import model_rules
from synth_ai.config.common import (
    RL_ALGORITHMS,
    SFT_ALGORITHMS,
    ResolveContext,
    algorithm_combo,
    algorithm_complete,
    algorithm_label,
    describe_combos,
    table,
)
from synth_ai.config.diagnostics import Findings, checked_data, validate_section
from synth_ai.config.loaded import LoadedConfig
from synth_ai.config.rl_schema import RLConfig
from synth_ai.config.toml_source import TomlSource
from synth_ai.config.unused_keys import note_unused_keys
from synth_ai.errors import InvalidInputError
from synth_ai.models.registry import check_trainable, experimental_allowed, resolve_model

__all__ = ["RLConfig", "load_rl"]


_JUDGE_PROVIDER = re.compile(r"^(openai|groq|gemini)$")


def load_rl(source: TomlSource, ctx: ResolveContext) -> LoadedConfig:
    findings = Findings(source)
    validated = validate_section(findings, RLConfig, source.data)
    data = checked_data(validated, source.data)
    note_unused_keys(findings, "rl", data)
    _check_algorithm(findings, data)
    _check_required_sections(findings, data)
    model_key, model_id = _check_model_choice(findings, data, ctx)
    _check_topology(findings, data)
    _check_training(findings, data)
    _check_judge(findings, data)
    task_url = _resolve_task_url(findings, data, ctx)

    resolved_model = None
    if model_id:
        try:
            resolved_model = resolve_model(model_id)
            if model_key != "source" and resolved_model.is_fine_tuned:
                findings.error_found((_model_table(data), model_key), "a fine-tuned id cannot be a base model",
                                     model_id, fix="move it to [model].source")
            check_trainable(resolved_model, "rl", allow_experimental=experimental_allowed(ctx.allow_experimental,
                                                                                           ctx.environ),
                            environ=ctx.environ)
        except InvalidInputError as exc:
            findings.error_found((_model_table(data), model_key), exc.message, model_id, fix=exc.hint)
            resolved_model = None
    findings.raise_if_errors()
    assert validated is not None

    resolved = validated.model_dump(mode="json", exclude_none=True)
    _inject_defaults(findings, resolved, task_url, ctx)
    if resolved_model is not None:
        table_name = _model_table(data)
        target = resolved.setdefault(table_name, {})
        if ctx.model:
            target.pop("base", None)
            target.pop("model_name", None)
            target["source"] = resolved_model.canonical
        else:
            target[model_key] = resolved_model.canonical
        model_rules.resolve_rl(findings, resolved_model.base, resolved, table_name)
    findings.raise_if_errors()
    return LoadedConfig(kind="rl", source=source, resolved=resolved, issues=findings.issues, model=resolved_model,
                        task_url=task_url)


def _model_table(data: dict[str, Any]) -> str:
    return "model" if isinstance(data.get("model"), dict) or not isinstance(data.get("policy"), dict) else "policy"


def _check_algorithm(findings: Findings, data: dict[str, Any]) -> None:
    algorithm = data.get("algorithm")
    if not isinstance(algorithm, dict):
        return  # missing or wrong type: reported by the schema pass
    if not algorithm_complete(algorithm):
        return  # a missing or mistyped key: reported by the schema pass
    combo = algorithm_combo(algorithm)
    if combo in RL_ALGORITHMS:
        return
    if combo in SFT_ALGORITHMS:
        findings.error(("algorithm",), f"config contains algorithm '{algorithm_label(algorithm)}', but this command "
                       "expects RL", fix="use `--type sft` for SFT configs, or set the RL algorithm: "
                       + describe_combos(RL_ALGORITHMS))
        return
    findings.error_found(("algorithm",), "unsupported algorithm configuration", algorithm_label(algorithm),
                         fix="use " + describe_combos(RL_ALGORITHMS))


def _check_required_sections(findings: Findings, data: dict[str, Any]) -> None:
    if "model" not in data and "policy" not in data:
        findings.error(("model",), "an RL config needs a [model] (or [policy]) section",
                       fix='add [model] with base = "Qwen/Qwen3-4B" (or source = "ft:..."), trainer_mode and label')
    if "compute" not in data:
        findings.error(("compute",), "an RL config needs a [compute] section",
                       fix='add [compute] with gpu_type = "H100" and gpu_count = 2')
    if "rollout" not in data:
        findings.error(("rollout",), "an RL config needs a [rollout] section",
                       fix="add [rollout] with env_name, policy_name, max_turns, episodes_per_batch and "
                           "max_concurrent_rollouts")


def _check_model_choice(findings: Findings, data: dict[str, Any], ctx: ResolveContext) -> tuple[str, str | None]:
    """Exactly one of [model].source / [model].base (or [policy].model_name / source); returns (key, id)."""
    name = _model_table(data)
    section = table(data, name)
    if not section:
        return "base", ctx.model
    first, second = ("source", "base") if name == "model" else ("source", "model_name")
    has_first = isinstance(section.get(first), str) and bool(section[first].strip())
    has_second = isinstance(section.get(second), str) and bool(section[second].strip())
    if ctx.model:  # --model replaces the configured model with a source
        return "source", ctx.model
    if has_first and has_second:
        findings.error((name,), f"exactly one of [{name}].{first} or [{name}].{second} is required, found both",
                       fix=f"keep [{name}].{second} for a base model (e.g. 'Qwen/Qwen3-1.7B') or [{name}].{first} "
                           "for a fine-tuned model id")
        return first, None
    if not has_first and not has_second:
        findings.error((name,), f"exactly one of [{name}].{first} or [{name}].{second} is required, found neither",
                       fix=f"add {second} = \"Qwen/Qwen3-4B\" (a base model) or {first} = \"ft:...\" (fine-tuned)")
        return first, None
    key = first if has_first else second
    return key, section[key].strip()


def _check_topology(findings: Findings, data: dict[str, Any]) -> None:
    compute = table(data, "compute")
    topology = table(data, "topology") or table(compute, "topology")
    where = ("topology",) if table(data, "topology") else ("compute", "topology")
    if compute and not topology:
        findings.error(("compute", "topology"), "an RL config needs a topology ([topology] or [compute.topology])",
                       fix='add [topology] with type = "single_node_split", gpus_for_vllm, gpus_for_training')
        return
    vllm = table(data, "vllm")
    tp_topology = topology.get("tensor_parallel")
    tp_vllm = vllm.get("tensor_parallel_size")
    if (tp_topology is None) != (tp_vllm is None):
        missing = "[vllm].tensor_parallel_size" if tp_vllm is None else f"[{'.'.join(where)}].tensor_parallel"
        findings.error(where + ("tensor_parallel",) if tp_topology is None else ("vllm", "tensor_parallel_size"),
                       "tensor parallelism must be set in both the topology and [vllm]",
                       fix=f"also set {missing} to the same value")
    elif isinstance(tp_topology, int) and isinstance(tp_vllm, int) and tp_topology != tp_vllm:
        findings.error_found(("vllm", "tensor_parallel_size"),
                             f"disagrees with the topology's tensor_parallel ({tp_topology})", tp_vllm,
                             fix="use the same tensor-parallel degree in both places")
    gpus = [topology.get(k) for k in ("gpus_for_vllm", "gpus_for_training", "gpus_for_ref")]
    count, nodes = compute.get("gpu_count"), compute.get("nodes", 1)
    if all(isinstance(g, int) and not isinstance(g, bool) for g in gpus if g is not None) and isinstance(count, int) \
            and isinstance(nodes, int) and not isinstance(count, bool):
        used = sum(g for g in gpus if g is not None)
        available = count * max(nodes, 1)
        if used > available:
            findings.error_found(where + ("gpus_for_training",),
                                 f"the topology uses {used} GPUs but [compute] provides {available}", used,
                                 fix="lower gpus_for_vllm/gpus_for_training/gpus_for_ref or raise "
                                     "[compute].gpu_count")
        elif (conflict := topology_conflict(data)) is not None:  # within [compute], but none left to train on
            path, message, found, fix = conflict
            findings.error_found(path, message, found, fix=fix)
        if isinstance(tp_vllm, int) and tp_vllm > 0 and isinstance(topology.get("gpus_for_vllm"), int) \
                and topology["gpus_for_vllm"] % tp_vllm:
            findings.error_found(where + ("gpus_for_vllm",),
                                 f"must be a multiple of the tensor-parallel degree ({tp_vllm})",
                                 topology["gpus_for_vllm"], fix="give vLLM a multiple of tensor_parallel GPUs")


def topology_conflict(data: dict[str, Any]) -> tuple[tuple[str, ...], str, Any, str] | None:
    """(key path, what is wrong, found, fix) when the split topology's inference engines take every GPU of
    `[compute]` (issue 39 item 2: `gpus_for_vllm >= gpu_count x nodes` leaves none to train on); None otherwise.
    Checked by `config validate` and `train`, and again when the backend creates the job."""
    compute = table(data, "compute")
    topology = table(data, "topology") or table(compute, "topology")
    where = ("topology",) if table(data, "topology") else ("compute", "topology")
    vllm, count, nodes = topology.get("gpus_for_vllm"), compute.get("gpu_count"), compute.get("nodes", 1)
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (vllm, count, nodes)) or vllm <= 0:
        return None
    available = count * max(nodes, 1)
    if vllm < available:
        return None
    return (where + ("gpus_for_vllm",),
            f"gives all {available} GPUs of [compute] to the inference engines and leaves no GPU to train on",
            vllm, f"set gpus_for_vllm to at most {available - 1} (with gpus_for_training on the rest), or raise "
                  "[compute].gpu_count")


def async_conflict(training: dict[str, Any]) -> tuple[tuple[str, ...], str, Any, str] | None:
    """(key path, what is wrong, found, fix) when `[training]` asks for asynchronous GSPO (`max_staleness` > 0)
    with a setting it cannot honour: the rollout engine must get the weights after every optimiser step, so
    `weight_sync_interval` (or `[training.weight_sync].interval`) must be 1. None when it can run."""
    staleness = training.get("max_staleness")
    if isinstance(staleness, bool) or not isinstance(staleness, int) or staleness <= 0:
        return None
    sync = training.get("weight_sync") if isinstance(training.get("weight_sync"), dict) else {}
    for path, value in ((("training", "weight_sync_interval"), training.get("weight_sync_interval")),
                        (("training", "weight_sync", "interval"), sync.get("interval"))):
        if isinstance(value, int) and not isinstance(value, bool) and value > 1:
            return (path, f"max_staleness = {staleness} (asynchronous GSPO) publishes the weights after every "
                          "optimiser step, so the weight sync interval must be 1", value,
                    "set it to 1, or set [training].max_staleness = 0 for the synchronous loop")
    return None


def _check_training(findings: Findings, data: dict[str, Any]) -> None:
    training = table(data, "training")
    conflict = async_conflict(training)
    if conflict is not None:
        path, message, found, fix = conflict
        findings.error_found(path, message, found, fix=fix)
    sync = table(training, "weight_sync")
    if not sync:
        return
    if sync.get("enable") is False:
        findings.error(("training", "weight_sync", "enable"), "weight sync cannot be disabled for RL training",
                       fix="set enable = true or remove [training.weight_sync]")
    targets = sync.get("targets")
    if isinstance(targets, list) and "policy" not in targets:
        findings.error_found(("training", "weight_sync", "targets"), "must include \"policy\"", targets,
                             fix='set targets = ["policy"]')
    mode = sync.get("mode")
    if isinstance(mode, str) and mode != "direct":
        findings.warn(("training", "weight_sync", "mode"), f"only \"direct\" weight sync exists; {mode!r} is "
                      "replaced by \"direct\"", fix='set mode = "direct"')


def _check_judge(findings: Findings, data: dict[str, Any]) -> None:
    judge = table(data, "judge")
    if "judge" in data and isinstance(data["judge"], dict) and judge.get("enabled", True) is not False:
        options = table(judge, "options")
        if not options:
            findings.error(("judge", "options"), "[judge] needs a [judge.options] table",
                           fix='add [judge.options] with provider = "openai" and model = "gpt-5-nano"')
        else:
            provider = options.get("provider")
            if not (isinstance(provider, str) and _JUDGE_PROVIDER.match(provider)):
                findings.error_found(("judge", "options", "provider"), "expected one of openai, groq, gemini",
                                     provider, fix='set provider = "openai"')
            model = options.get("model")
            if not (isinstance(model, str) and model.strip()):
                findings.error_found(("judge", "options", "model"), "expected a non-empty judge model name", model,
                                     fix='set model = "gpt-5-nano" (or another model of that provider)')
            if options.get("event") is False and options.get("outcome") is False:
                findings.error(("judge", "options"), "at least one of event or outcome judging must be on",
                               fix="set event = true or outcome = true")
    weights = table(table(data, "rubric"), "weights")
    if weights:
        values = [weights.get(k, d) for k, d in (("env", 1.0), ("event", 0.0), ("outcome", 0.0))]
        if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values) and not any(values):
            findings.error(("rubric", "weights"), "rubric weights are all zero", fix="give env, event or outcome a "
                           "positive weight")


def _resolve_task_url(findings: Findings, data: dict[str, Any], ctx: ResolveContext) -> str | None:
    """--task-url > TASK_APP_URL (or TASK_APP_BASE_URL) > [services].task_url."""
    configured = table(data, "services").get("task_url")
    for candidate in (ctx.task_url, ctx.environ.get("TASK_APP_URL"), ctx.environ.get("TASK_APP_BASE_URL"),
                      configured if isinstance(configured, str) else None):
        if candidate and candidate.strip():
            url = candidate.strip().rstrip("/")
            if not re.match(r"^https?://[^/\s]+", url):
                findings.error_found(("services", "task_url"), "the task app URL must start with http:// or https://",
                                     url, fix="set an absolute URL such as http://127.0.0.1:8001")
                return None
            return url
    findings.error(("services", "task_url"), "a task app URL is required",
                   fix="pass --task-url, set TASK_APP_URL, or add [services] task_url = \"http://127.0.0.1:8001\"")
    return None


def _inject_defaults(findings: Findings, resolved: dict[str, Any], task_url: str | None, ctx: ResolveContext) -> None:
    if task_url:
        resolved.setdefault("services", {})["task_url"] = task_url
    training = resolved.get("training")
    if isinstance(training, dict):
        interval = training.get("weight_sync_interval", 1)
        sync = training.get("weight_sync")
        if sync is None:
            training["weight_sync"] = {"enable": True, "mode": "direct", "targets": ["policy"], "interval": interval}
        else:
            sync["mode"] = "direct"
            sync.setdefault("enable", True)
            sync.setdefault("targets", ["policy"])
            sync.setdefault("interval", interval)
    compute_topology = resolved.get("compute", {}).get("topology") if isinstance(resolved.get("compute"), dict) \
        else None
    topology = compute_topology if isinstance(compute_topology, dict) else resolved.get("topology")
    if isinstance(topology, dict):
        topology.setdefault("reference_placement", "none")
    resolved.setdefault("reference", {}).setdefault("placement", "none")
