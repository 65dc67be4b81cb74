"""`synth-ai models export --push-to-hub REPO`: upload an exported folder to the Hugging Face Hub.

Everything that can fail before an upload is checked first: the token (`HF_TOKEN`, from the environment or the
`.env` the command loaded), an adapter whose base is not on the hub (it could not be loaded from there), and the
hub itself (`whoami`, which also proves the token). The upload is one commit: the folder's files and a repo card
(`README.md`), so the repo never holds half a model. `huggingface_hub` is imported only here.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from synth_ai.errors import AuthError, InvalidInputError, NetworkError

TOKEN_HINT = ("Set HF_TOKEN to a write token (https://huggingface.co/settings/tokens), in the environment or in the "
              ".env file the command reads.")


def hub_token() -> str:
    from synth_ai.env.dotenv_files import get_env

    token = get_env("HF_TOKEN") or get_env("HUGGING_FACE_HUB_TOKEN")
    if not token:
        raise AuthError("--push-to-hub needs a Hugging Face token, and none is set; nothing was exported or "
                        "uploaded.", hint=TOKEN_HINT)
    return token


def check_pushable(manifest: dict[str, Any], repo: str) -> None:
    """An adapter whose base exists only on this machine would be unusable from the hub: refuse it."""
    if "/" not in repo or repo.count("/") != 1 or not all(repo.split("/")):
        raise InvalidInputError(f"--push-to-hub takes a repo id as owner/name (found {repo!r}).",
                                hint="E.g. --push-to-hub my-user/my-model.")
    if manifest.get("local_base"):
        raise InvalidInputError(
            f"The adapter of {manifest['model']} is on {manifest['base_model']}, a base built on this machine that "
            "is not on the Hugging Face Hub: pushed alone, the adapter could not be loaded from there.",
            hint="Pass --merge to push the merged model instead.")


def check_hub(token: str) -> str:
    """The user the token belongs to; a clear error, before any upload, when the hub cannot be reached."""
    if os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in {"1", "true", "yes", "on"}:
        raise NetworkError("HF_HUB_OFFLINE is set, so nothing can be pushed to the Hugging Face Hub; nothing was "
                           "uploaded.", hint="Unset HF_HUB_OFFLINE on a machine with network access and run the "
                           "command again (the export is kept in --out).")
    from huggingface_hub import HfApi
    from huggingface_hub.errors import HfHubHTTPError

    api = HfApi(endpoint=os.environ.get("HF_ENDPOINT") or None, token=token)
    try:
        return str(api.whoami().get("name") or "")
    except HfHubHTTPError as exc:
        status = getattr(getattr(exc, "response", None), "status_code", None)
        if status in (401, 403):
            raise AuthError(f"The Hugging Face Hub refused the token ({status}); nothing was uploaded.",
                            hint=TOKEN_HINT) from None
        raise NetworkError(f"The Hugging Face Hub answered {status}; nothing was uploaded.",
                           hint="Retry later.") from None
    except Exception as exc:  # noqa: BLE001 - no network: the error type depends on huggingface_hub's HTTP library
        raise NetworkError(f"Cannot reach the Hugging Face Hub ({api.endpoint}): {type(exc).__name__}; nothing "
                           "was uploaded.", hint="Run the command again with network access (the export is kept "
                           "in --out, so pass --force to reuse the folder).") from None


def repo_card(manifest: dict[str, Any], repo: str) -> str:
    """The repo's README.md: front matter the hub reads (base model, library), and how to load the model."""
    adapter = manifest.get("format") == "peft_adapter"
    base = manifest.get("base_model_name_or_path") or manifest.get("base_model")
    lines = ["---", "library_name: " + ("peft" if adapter else "transformers")]
    if base and base != manifest["model"]:
        lines.append(f"base_model: {base}")
    lines += ["tags:", "  - synth-ai", "---", "", f"# {repo}", "",
              f"`{manifest['model']}`, exported with `synth-ai models export`"
              + (f" from job `{manifest['job_id']}`" if manifest.get("job_id") else "") + "."
              + (" The LoRA adapter is merged into the base." if manifest.get("merged") else ""), "", "```python"]
    if adapter:
        lines += ["from peft import AutoPeftModelForCausalLM", "",
                  f'model = AutoPeftModelForCausalLM.from_pretrained("{repo}")']
    else:
        lines += ["from transformers import AutoModelForCausalLM", "",
                  f'model = AutoModelForCausalLM.from_pretrained("{repo}")']
    return "\n".join([*lines, "```", ""])


def upload_plan(folder: Path, manifest: dict[str, Any], repo: str) -> tuple[list[str], str]:
    """(the paths that would be uploaded, the repo card): the folder's files and README.md (the card, which
    replaces a README the folder may hold)."""
    files = sorted(p.relative_to(folder).as_posix() for p in Path(folder).rglob("*") if p.is_file())
    return sorted({*files, "README.md"}), repo_card(manifest, repo)


def push(folder: Path, manifest: dict[str, Any], repo: str, token: str, *, private: bool) -> str:
    """Create the repo if needed and upload the folder with its card in one commit; the repo's URL."""
    from huggingface_hub import CommitOperationAdd, HfApi

    files, card = upload_plan(folder, manifest, repo)
    api = HfApi(endpoint=os.environ.get("HF_ENDPOINT") or None, token=token)
    url = api.create_repo(repo, private=private, exist_ok=True)
    operations = [CommitOperationAdd(path_in_repo=name, path_or_fileobj=str(Path(folder) / name))
                  for name in files if name != "README.md"]
    operations.append(CommitOperationAdd(path_in_repo="README.md", path_or_fileobj=card.encode()))
    api.create_commit(repo, operations=operations, commit_message=f"Upload {manifest['model']} (synth-ai)")
    return str(url)
