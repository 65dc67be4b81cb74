"""`synth-ai models list|get|export|import`: the model registry, and models in and out of the backend."""

from __future__ import annotations

import typer

from synth_ai.cli.app import json_option, output_of
from synth_ai.cli.remote import env_file_option, set_timeout, timeout_option


def register(app: typer.Typer) -> None:
    group = typer.Typer(help="Models you can train and serve: ids, modalities, training modes.", no_args_is_help=True)

    @group.command("list")
    def list_models(
        ctx: typer.Context,
        mode: str = typer.Option(None, "--mode", help="Only models trainable this way: sft or rl."),
        family: str = typer.Option(None, "--family", help="Only this family, e.g. Qwen3-VL."),
        backend: str = typer.Option(None, "--backend", help="Also list this backend's fine-tuned models (default: "
                                    "the embedded backend, when it runs)."),
        env_file: list[str] = env_file_option(),
        timeout: float = timeout_option(),
        json_flag: bool = json_option(),
    ) -> None:
        """List the registry's models, and the fine-tuned models of the backend."""
        from synth_ai.env.dotenv_files import load_command_env
        from synth_ai.models.registry import all_models, experimental_ids

        out = output_of(ctx, json_flag)
        load_command_env(env_file)
        if mode is not None and mode not in {"sft", "rl"}:
            raise typer.BadParameter(f"must be 'sft' or 'rl', not {mode!r}.", param_hint="'--mode'")
        experimental = experimental_ids()
        models = [
            m for m in all_models()
            if (mode is None or mode in m.training_modes)
            and (family is None or m.family.lower() == family.lower())
        ]
        docs = [m.to_dict(experimental=m.id in experimental) for m in models]
        fine_tuned, source = _fine_tuned_models(out, backend, timeout)

        def human(o) -> None:
            o.table(
                ["model_id", "family", "provider", "lifecycle", "modalities", "training_modes", "thinking"],
                [[d["id"], d["family"], d["provider"], "experimental" if d["experimental"] else d["lifecycle"],
                  "+".join(d["modalities"]), ",".join(d["training_modes"]), "yes" if d["supports_thinking"] else ""]
                 for d in docs],
            )
            if source:
                o.table(["fine_tuned_model", "base_model", "job_id", "created_at"],
                        [[f.get("id"), f.get("base_model"), f.get("job_id") or f.get("kind"), f.get("created_at")]
                         for f in fine_tuned],
                        title=f"Fine-tuned and imported models on {source}")

        result = {"models": docs}
        if source:
            result.update(fine_tuned=fine_tuned, backend=source)
        out.result(result, human)

    @group.command("get")
    def get_model(
        ctx: typer.Context,
        model_id: str = typer.Argument(..., help="Model id (case-insensitive; ft:/rl: ids resolve to their base)."),
        json_flag: bool = json_option(),
    ) -> None:
        """Show one model's metadata."""
        from synth_ai.models.registry import experimental_ids, resolve_model

        out = output_of(ctx, json_flag)
        resolved = resolve_model(model_id)
        doc = resolved.base.to_dict(experimental=resolved.base.id in experimental_ids())
        if resolved.is_fine_tuned:
            doc = {"id": resolved.canonical, "fine_tuned": True, "prefix": resolved.prefix, "base_model": doc}

        def human(o) -> None:
            info = doc.get("base_model", doc)
            if resolved.is_fine_tuned:
                o.info(f"{resolved.canonical} (fine-tuned from {info['id']})")
            o.table(["field", "value"], [[k, v] for k, v in info.items()])

        out.result(doc, human)

    from synth_ai.cli.models_transfer_cmd import add_transfer_commands

    add_transfer_commands(group)
    app.add_typer(group, name="models")


def _fine_tuned_models(out, backend_flag: str | None, timeout: float | None) -> tuple[list[dict], str | None]:
    """Fine-tuned models from `--backend`, or from the embedded backend when one runs here (never started)."""
    from synth_ai.connect.embedded_backend import open_api, running_embedded_backend
    from synth_ai.env.backend_url import resolve_backend
    from synth_ai.errors import SynthError

    target = resolve_backend(backend_flag)
    if backend_flag is None and target.embedded:
        if running_embedded_backend() is None:
            return [], None
    try:
        api, target = open_api(target, say=out.info, autostart=False)
        set_timeout(api, timeout)
        with api.transport:
            doc = api.models()
    except SynthError as exc:
        if backend_flag is not None:  # asked for explicitly: its failure is the command's failure
            raise
        out.warn(f"fine-tuned models of {target.api_base} not listed: {exc.message}")
        return [], None
    rows = doc.get("data", []) if isinstance(doc, dict) else list(doc or [])
    return [r for r in rows if r.get("kind") in ("fine_tuned", "imported") or str(r.get("id", "")).startswith(
        ("ft:", "fft:", "qft:", "rl:", "imported:"))], target.api_base
