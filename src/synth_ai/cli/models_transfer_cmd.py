"""`synth-ai models export|import`: a model of the backend out as a Hugging Face folder (optionally pushed to the
hub), and a folder from elsewhere in as a model jobs can start from."""

from __future__ import annotations

from pathlib import Path

import typer

from synth_ai.cli.app import json_option, output_of
from synth_ai.cli.remote import backend_option, connect, env_file_option, timeout_option


def add_transfer_commands(group: typer.Typer) -> None:
    @group.command("export")
    def export_model(
        ctx: typer.Context,
        model_id: str = typer.Argument(..., help="ft:/rl: model, a Tinker checkpoint (tinker://...), or a base model of "
                                      "the backend's registry."),
        out_dir: Path = typer.Option(..., "--out", help="Folder to write (new or empty; see --force)."),
        merge: bool = typer.Option(False, "--merge", help="LoRA models: write the adapter merged into its base (a "
                                   "full model) instead of a PEFT adapter folder."),
        force: bool = typer.Option(False, "--force", help="Replace a non-empty --out."),
        push_to_hub: str = typer.Option(None, "--push-to-hub", metavar="REPO", help="Then upload the folder to "
                                        "this Hugging Face repo (owner/name), token from HF_TOKEN or .env."),
        private: bool = typer.Option(False, "--private", help="With --push-to-hub: create the repo private."),
        backend: str = backend_option(),
        env_file: list[str] = env_file_option(),
        timeout: float = timeout_option(),
        json_flag: bool = json_option(),
    ) -> None:
        """Write a model as a folder transformers, peft and vLLM load (LoRA: a PEFT adapter; --merge: full)."""
        from synth_ai.client import hub_push
        from synth_ai.client.model_exports import check_destination, download_export, request_export
        from synth_ai.env.dotenv_files import load_command_env

        out = output_of(ctx, json_flag)
        load_command_env(env_file)  # HF_TOKEN may come from .env: read it before anything is asked of a backend
        check_destination(out_dir, force=force)
        token = hub_push.hub_token() if push_to_hub else None
        api = connect(out, backend, env_file, timeout, autostart=True)
        with api.transport:
            manifest = request_export(api, model_id, merge=merge)
            if push_to_hub:
                hub_push.check_pushable(manifest, push_to_hub)
                hub_push.check_hub(token)
            total = sum(int(f["size"]) for f in manifest["files"])
            out.info(f"Downloading {len(manifest['files'])} files ({total / 1e6:.1f} MB) into {out_dir} ...")
            folder = download_export(api, manifest, out_dir)
        doc = {"model": manifest["model"], "out": str(folder), "format": manifest["format"],
               "merged": manifest["merged"], "base_model": manifest["base_model"],
               "base_model_name_or_path": manifest["base_model_name_or_path"]
               or (str(folder / manifest["local_base"]) if manifest.get("local_base") else None),
               "files": [f["path"] for f in manifest["files"]]}
        if push_to_hub:
            doc["hub_url"] = hub_push.push(folder, manifest, push_to_hub, token, private=private)

        def human(o) -> None:
            kind = "PEFT adapter" if manifest["format"] == "peft_adapter" else "full model"
            o.info(f"Exported {manifest['model']} ({kind}) to {folder}")
            if doc["base_model_name_or_path"] and manifest["format"] == "peft_adapter":
                o.info(f"Its base: {doc['base_model_name_or_path']}")
            if doc.get("hub_url"):
                o.info(f"Pushed to {doc['hub_url']}")

        out.result(doc, human)

    @group.command("import")
    def import_model(
        ctx: typer.Context,
        folder: Path = typer.Argument(..., help="A Hugging Face model folder or a PEFT adapter folder."),
        name: str = typer.Option(None, "--name", help="The name in its id (default: the folder's name)."),
        base: str = typer.Option(None, "--base", help="The registry model it is built on (required for a full "
                                 "model; for an adapter, read from its adapter_config.json)."),
        backend: str = backend_option(),
        env_file: list[str] = env_file_option(),
        timeout: float = timeout_option(),
        json_flag: bool = json_option(),
    ) -> None:
        """Register a local folder as `imported:<base>:<name>`, usable as the model of SFT and RL jobs."""
        out = output_of(ctx, json_flag)
        api = connect(out, backend, env_file, timeout, autostart=True)
        body = {"path": str(folder.expanduser().resolve()), "name": name, "base": base}
        with api.transport:
            entry = api.transport.post_json("/imports", {k: v for k, v in body.items() if v is not None})

        def human(o) -> None:
            o.info(f"Imported {folder} as {entry.get('id')} ({entry.get('training') or 'full'}); use it as the "
                   "model of an SFT or RL job.")

        out.result(entry, human)
