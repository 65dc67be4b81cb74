"""Load any config file: parse, infer or check its kind, validate it, resolve it."""

from __future__ import annotations

from pathlib import Path

from synth_ai.config.common import ResolveContext
from synth_ai.config.kinds import CONFIG_KINDS, infer_kind
from synth_ai.config.loaded import LoadedConfig
from synth_ai.config.toml_source import load_toml
from synth_ai.errors import ConfigError, ConfigIssue, InvalidInputError


def load_config(path: str | Path, kind: str | None = None, ctx: ResolveContext | None = None) -> LoadedConfig:
    """Validate `path` as `kind` (inferred when None). Raises ConfigError listing every problem found."""
    from synth_ai.config.eval import load_eval
    from synth_ai.config.filter import load_filter
    from synth_ai.config.rl import load_rl
    from synth_ai.config.sft import load_sft

    loaders = {"rl": load_rl, "sft": load_sft, "eval": load_eval, "filter": load_filter}
    source = load_toml(path)
    if kind is not None and kind not in CONFIG_KINDS:
        raise InvalidInputError(f"Unknown config kind {kind!r}.", hint=f"Use one of: {', '.join(CONFIG_KINDS)}.")
    chosen = kind or infer_kind(source.data)
    if chosen is None:
        issue = ConfigIssue(
            message="cannot tell what kind of config this is",
            file=source.display,
            key="[algorithm]",
            fix="add [algorithm] type = \"online\" (RL) or \"offline\" (SFT), an [eval] table, or a [filter] table",
        )
        raise ConfigError([issue], file=source.display,
                          hint="Or pass the kind explicitly (train: --type rl|sft; config validate: --kind).")
    return loaders[chosen](source, ctx or ResolveContext())
