"""JSON Schemas of the config kinds, generated from the pydantic models (so they cannot drift)."""

from __future__ import annotations

from typing import Any


def config_schema(kind: str) -> dict[str, Any]:
    from synth_ai.config.eval import EvalConfig
    from synth_ai.config.filter import FilterConfig
    from synth_ai.config.rl import RLConfig
    from synth_ai.config.sft import SFTConfig

    if kind == "filter":
        schema = {"title": "FilterConfigFile", "type": "object", "required": ["filter"],
                  "properties": {"filter": {"$ref": "#/$defs/FilterConfig"}}, "additionalProperties": True}
        inner = FilterConfig.model_json_schema(ref_template="#/$defs/{model}")
        defs = inner.pop("$defs", {})
        defs["FilterConfig"] = inner
        schema["$defs"] = defs
        return {**_closed(schema), "additionalProperties": True}  # other tables of the file are not read
    model = {"rl": RLConfig, "sft": SFTConfig, "eval": EvalConfig}[kind]
    schema = model.model_json_schema(by_alias=True)
    if kind == "eval":
        schema["description"] = "Keys of the [eval] table (or of the whole file when it has no [eval] table)."
    return _closed(schema)


def _closed(schema: dict[str, Any]) -> dict[str, Any]:
    """A file's tables take only their own keys (`diagnostics.check_unknown_keys`); the models keep
    `extra="allow"` for job bodies from other clients, so the generated schema says so for every table but the
    policy config, whose other keys go to the task app."""
    tables = [schema, *schema.get("$defs", {}).values()]
    for table in tables:
        if table.get("additionalProperties") is True and table.get("title") != "PolicyRuntimeSection":
            table["additionalProperties"] = False
    return schema
