"""`synth-ai models export` against a real embedded backend (uvicorn on 127.0.0.1): base models, a LoRA fine-tune
as a PEFT adapter and merged, each loaded with transformers/peft and decoded greedily against the backend's own
inference endpoint; a download resumed after a dropped connection; bad input."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

import httpx
import pytest

from backend_support import TINY_TEXT, chat_jsonl, job_status, sft_body, upload, wait_for
from conftest import free_port, run_cli

pytestmark = pytest.mark.slow
torch = pytest.importorskip("torch")
pytest.importorskip("peft")

PROMPT = [{"role": "user", "content": "What is 3 plus 3?"}]
MAX_TOKENS = 12


@pytest.fixture
def backend(shared_backend):
    """The worker's shared backend: these tests export, import, register and train models under ids of their own,
    and look in its model list only for those ids."""
    return shared_backend


@pytest.fixture(scope="module")
def lora_model(shared_backend, tmp_path_factory) -> str:
    """A LoRA fine-tune of the tiny Qwen3, trained by the backend (a few steps)."""
    with shared_backend.client() as api:
        file_id = upload(api, chat_jsonl(tmp_path_factory.mktemp("data") / "train.jsonl", n=8)).json()["id"]
        done = train(api, sft_body(file_id, steps=4, train_kind="lora", learning_rate=5e-3))
    return done["fine_tuned_model"]


def train(api: httpx.Client, body: dict[str, Any]) -> dict[str, Any]:
    """Create and start an SFT job, wait for its end: the succeeded job."""
    job = api.post("/learning/jobs", json=body)
    assert job.status_code == 201, job.text
    job_id = job.json()["id"]
    api.post(f"/learning/jobs/{job_id}/start", json={})
    wait_for(lambda: job_status(api, job_id) in {"succeeded", "failed", "cancelled"}, timeout=240, interval=0.5,
             what=f"the job {job_id}")
    done = api.get(f"/learning/jobs/{job_id}").json()
    assert done["status"] == "succeeded", done
    return done


@pytest.fixture(autouse=True)
def backend_key(backend, monkeypatch):
    monkeypatch.setenv("SYNTH_API_KEY", backend.key)


def export(backend, model_id: str, out: Path, *extra: str):
    return run_cli("--json", "models", "export", model_id, "--out", str(out), "--backend", backend.url, *extra)


def backend_reply(backend, model_id: str) -> tuple[str, int]:
    """(text, completion tokens) of the backend's greedy answer to PROMPT."""
    with backend.client(timeout=120) as api:
        reply = api.post("/inference/v1/chat/completions", json={
            "model": model_id, "messages": PROMPT, "temperature": 0, "max_tokens": MAX_TOKENS})
    assert reply.status_code == 200, reply.text
    doc = reply.json()
    return doc["choices"][0]["message"]["content"], doc["usage"]["completion_tokens"]


def greedy_tokens(model: Any, folder: Path) -> list[int]:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    prompt = tokenizer.apply_chat_template(PROMPT, add_generation_prompt=True, tokenize=False)
    ids = tokenizer(prompt, return_tensors="pt", add_special_tokens=False)["input_ids"]
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=MAX_TOKENS, do_sample=False)
    tokens = out[0, ids.shape[1]:].tolist()
    eos = set(model.generation_config.eos_token_id if isinstance(model.generation_config.eos_token_id, list)
              else [model.generation_config.eos_token_id])
    return tokens[:-1] if tokens and tokens[-1] in eos else tokens


def assert_same_as_backend(backend, model_id: str, model: Any, folder: Path) -> list[int]:
    from transformers import AutoTokenizer

    tokens = greedy_tokens(model, folder)
    text, count = backend_reply(backend, model_id)
    decoded = AutoTokenizer.from_pretrained(str(folder)).decode(tokens, skip_special_tokens=True)
    # the endpoint answers the reply without its (here empty) thinking block: compare the same part
    reply = re.sub(r"^\s*<think>.*?</think>\s*", "", decoded, flags=re.S)
    assert (reply.strip(), len(tokens)) == (text.strip(), count)
    return tokens


def test_a_base_model_exports_as_a_folder_transformers_loads(backend, tmp_path):
    from transformers import AutoModelForCausalLM

    result = export(backend, TINY_TEXT, tmp_path / "base")
    assert result.exit_code == 0, result.stderr
    doc = result.json()
    assert doc["format"] == "full" and doc["merged"] is False
    folder = Path(doc["out"])
    names = {p.name for p in folder.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "chat_template.jinja",
            "generation_config.json"} <= names
    assert "synth_model.json" not in names  # our own card stays home
    model = AutoModelForCausalLM.from_pretrained(str(folder)).eval()
    assert_same_as_backend(backend, TINY_TEXT, model, folder)


def test_a_lora_model_exports_as_an_adapter_and_merged_alike(backend, lora_model, tmp_path):
    from peft import AutoPeftModelForCausalLM
    from transformers import AutoModelForCausalLM

    adapter = export(backend, lora_model, tmp_path / "adapter")
    assert adapter.exit_code == 0, adapter.stderr
    folder = Path(adapter.json()["out"])
    assert adapter.json()["format"] == "peft_adapter"
    assert {"adapter_config.json", "adapter_model.safetensors", "tokenizer.json", "chat_template.jinja"} <= {
        p.name for p in folder.iterdir()}
    assert not (folder / "model.safetensors").exists()
    config = json.loads((folder / "adapter_config.json").read_text())
    # the tiny base is built on this machine, not on the hub: it came along, and the adapter names its folder
    assert config["base_model_name_or_path"] == str(folder / "base_model")
    assert (folder / "base_model" / "model.safetensors").exists()
    peft_model = AutoPeftModelForCausalLM.from_pretrained(str(folder)).eval()
    adapter_tokens = assert_same_as_backend(backend, lora_model, peft_model, folder)

    merged = export(backend, lora_model, tmp_path / "merged", "--merge")
    assert merged.exit_code == 0, merged.stderr
    merged_folder = Path(merged.json()["out"])
    assert merged.json()["format"] == "full" and merged.json()["merged"] is True
    assert not (merged_folder / "adapter_config.json").exists()
    merged_model = AutoModelForCausalLM.from_pretrained(str(merged_folder)).eval()
    assert greedy_tokens(merged_model, merged_folder) == adapter_tokens
    base = AutoModelForCausalLM.from_pretrained(str(folder / "base_model")).eval()
    assert any(not torch.equal(a, b) for a, b in zip(base.state_dict().values(), merged_model.state_dict().values()))


# Faults and bad input -----------------------------------------------------------------------------------------------
class CutStream(httpx.SyncByteStream):
    """The real body, broken after `limit` bytes (a dropped connection) or with one byte flipped (`corrupt`)."""

    def __init__(self, inner: Any, limit: int, *, corrupt: bool = False) -> None:
        self.inner, self.limit, self.corrupt = inner, limit, corrupt

    def __iter__(self):
        sent = 0
        for chunk in self.inner:
            if sent <= self.limit < sent + len(chunk):
                at = self.limit - sent
                if not self.corrupt:
                    yield chunk[:at]
                    raise httpx.ReadError("connection dropped (injected)")
                chunk = chunk[:at] + bytes([chunk[at] ^ 0xFF]) + chunk[at + 1:]
            sent += len(chunk)
            yield chunk

    def close(self) -> None:
        self.inner.close()


class FaultyNetwork(httpx.BaseTransport):
    """The real HTTP transport, with the first `faults` downloads of `name` broken the way `CutStream` breaks them,
    and optionally no export route at all (a backend that predates it: FastAPI's plain 404)."""

    def __init__(self, name: str = "model.safetensors", *, faults: int = 1, corrupt: bool = False,
                 no_route: bool = False) -> None:
        self.inner = httpx.HTTPTransport()
        self.name, self.faults, self.corrupt, self.no_route = name, faults, corrupt, no_route
        self.seen: list[tuple[str | None, int]] = []  # (Range header, status) of each download of `name`

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if self.no_route and request.url.path.endswith("/api/exports"):
            return httpx.Response(404, json={"detail": "Not Found"})
        response = self.inner.handle_request(request)
        if "/exports/" in request.url.path and request.url.path.endswith("/" + self.name):
            self.seen.append((request.headers.get("range"), response.status_code))
            if self.faults > 0:
                self.faults -= 1
                return httpx.Response(response.status_code, headers=response.headers,
                                      stream=CutStream(response.stream, 200_000, corrupt=self.corrupt))
        return response


@pytest.fixture
def network(monkeypatch):
    from synth_ai.client import transport

    def install(**kwargs: Any) -> FaultyNetwork:
        faulty = FaultyNetwork(**kwargs)
        monkeypatch.setattr(transport, "HTTP_TRANSPORT_OVERRIDE", faulty)
        return faulty

    return install


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_dropped_download_resumes_where_it_broke(backend, tmp_path, network):
    faulty = network(faults=1)
    result = export(backend, TINY_TEXT, tmp_path / "resumed")
    assert result.exit_code == 0, result.stderr
    # the first GET broke after 200 000 bytes; the second asked for the rest and got it (206)
    assert faulty.seen == [(None, 200), ("bytes=200000-", 206)]
    source = backend.data_dir / "models" / "tiny"
    original = next(p for p in source.iterdir() if p.name.startswith("tiny-qwen3-r")) / "model.safetensors"
    assert sha256(tmp_path / "resumed" / "model.safetensors") == sha256(original)


def test_a_failed_download_leaves_no_folder(backend, tmp_path, network):
    network(faults=1, corrupt=True)
    parent = tmp_path / "exports"
    parent.mkdir()
    result = export(backend, TINY_TEXT, parent / "never")
    assert result.exit_code == 9, result.stderr  # ExitCode.SERVER: the bytes that came were not the file's
    assert "sha256" in result.json()["error"]["message"]
    assert list(parent.iterdir()) == []  # neither the folder nor its hidden temp copy


def test_a_backend_without_the_export_route_says_so(backend, tmp_path, network):
    network(no_route=True)
    result = export(backend, TINY_TEXT, tmp_path / "x")
    assert result.exit_code == 10, result.stderr  # ExitCode.UNAVAILABLE
    message = result.json()["error"]["message"]
    assert "has no export route" in message and backend.url in message
    assert not (tmp_path / "x").exists()


def test_unknown_and_pruned_models_are_named(backend, tmp_path):
    unknown = export(backend, "ft:synth-ai/tiny-qwen3:job_nope", tmp_path / "a")
    assert unknown.exit_code == 8, unknown.stderr  # ExitCode.NOT_FOUND
    assert "synth-ai models list" in unknown.json()["error"]["hint"]
    from synth_ai.backend.store.model_store import ModelStore

    ModelStore(backend.data_dir).register_fine_tuned("ft:synth-ai/tiny-qwen3:job_gone", TINY_TEXT, "job_gone",
                                                     tmp_path / "deleted-checkpoint")
    pruned = export(backend, "ft:synth-ai/tiny-qwen3:job_gone", tmp_path / "b")
    assert pruned.exit_code == 8, pruned.stderr
    error = pruned.json()["error"]
    assert "job job_gone" in error["message"] and "missing" in error["message"]
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_a_non_empty_folder_is_replaced_only_with_force(backend, tmp_path):
    out = tmp_path / "busy"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    refused = export(backend, TINY_TEXT, out)
    assert refused.exit_code == 3 and "--force" in refused.json()["error"]["hint"]
    assert [p.name for p in out.iterdir()] == ["notes.txt"]
    forced = export(backend, TINY_TEXT, out, "--force")
    assert forced.exit_code == 0, forced.stderr
    assert not (out / "notes.txt").exists() and (out / "config.json").exists()


# Pushing to the hub -------------------------------------------------------------------------------------------------
def test_push_without_a_token_fails_before_anything(backend, tmp_path, monkeypatch):
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.delenv("HUGGING_FACE_HUB_TOKEN", raising=False)
    result = export(backend, TINY_TEXT, tmp_path / "p", "--push-to-hub", "me/tiny")
    assert result.exit_code == 4, result.stderr  # ExitCode.AUTH
    assert "HF_TOKEN" in result.json()["error"]["hint"]
    assert not (tmp_path / "p").exists()


@pytest.mark.parametrize("offline", ["HF_HUB_OFFLINE", "unreachable endpoint"])
def test_push_without_the_hub_fails_before_uploading(backend, tmp_path, monkeypatch, offline):
    monkeypatch.setenv("HF_TOKEN", "hf_test_not_a_real_token")
    if offline == "HF_HUB_OFFLINE":
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    else:
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
        monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{free_port()}")
    result = export(backend, TINY_TEXT, tmp_path / "p", "--push-to-hub", "me/tiny")
    assert result.exit_code == 5, result.stderr  # ExitCode.NETWORK
    error = result.json()["error"]
    assert "nothing was uploaded" in error["message"] and error["hint"]
    assert "hf_test_not_a_real_token" not in result.stdout + result.stderr
    assert not (tmp_path / "p").exists()


def test_an_adapter_on_a_local_base_is_not_pushed_alone(backend, lora_model, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_test_not_a_real_token")
    result = export(backend, lora_model, tmp_path / "p", "--push-to-hub", "me/adapter")
    assert result.exit_code == 3, result.stderr
    assert "--merge" in result.json()["error"]["hint"] and not (tmp_path / "p").exists()


def test_the_upload_is_the_folder_and_a_repo_card(backend, lora_model, tmp_path):
    from synth_ai.client.hub_push import upload_plan

    result = export(backend, lora_model, tmp_path / "merged", "--merge")
    assert result.exit_code == 0, result.stderr
    folder = Path(result.json()["out"])
    manifest = {**result.json(), "job_id": lora_model.rsplit(":", 1)[-1]}
    files, card = upload_plan(folder, manifest, "me/tiny-pirate")
    assert files == sorted({p.name for p in folder.iterdir()} | {"README.md"})
    assert {"config.json", "model.safetensors", "tokenizer.json", "generation_config.json"} <= set(files)
    assert card.startswith("---\nlibrary_name: transformers\nbase_model: synth-ai/tiny-qwen3\n")
    assert f"`{lora_model}`" in card and "merged" in card
    assert 'AutoModelForCausalLM.from_pretrained("me/tiny-pirate")' in card


# Importing ------------------------------------------------------------------------------------------------------------
def test_an_exported_adapter_imports_and_trains_on_as_lora(backend, lora_model, tmp_path):
    exported = export(backend, lora_model, tmp_path / "adapter")
    assert exported.exit_code == 0, exported.stderr
    folder = Path(exported.json()["out"])
    mismatch = run_cli("--json", "models", "import", str(folder), "--base", "Qwen/Qwen3-0.6B", "--backend",
                       backend.url)
    assert mismatch.exit_code == 3, mismatch.stderr
    assert "synth-ai/tiny-qwen3" in mismatch.json()["error"]["message"]
    assert "Qwen/Qwen3-0.6B" in mismatch.json()["error"]["message"]

    imported = run_cli("--json", "models", "import", str(folder), "--name", "pirate", "--backend", backend.url)
    assert imported.exit_code == 0, imported.stderr
    model_id = imported.json()["id"]
    assert model_id == "imported:synth-ai/tiny-qwen3:pirate" and imported.json()["kind"] == "imported"
    listed = run_cli("--json", "models", "list", "--backend", backend.url)
    assert any(m["id"] == model_id and m["kind"] == "imported" for m in listed.json()["fine_tuned"])
    original_rank = json.loads((folder / "adapter_config.json").read_text())["r"]

    with backend.client() as api:
        file_id = upload(api, chat_jsonl(tmp_path / "more.jsonl", n=8)).json()["id"]
        wrong = api.post("/learning/jobs", json=sft_body(file_id, steps=2, model="imported:Qwen/Qwen3-0.6B:pirate"))
        assert wrong.status_code == 400 and wrong.json()["error"]["code"] == "adapter_base_mismatch", wrong.text
        assert {"Qwen/Qwen3-0.6B", "synth-ai/tiny-qwen3"} <= set(wrong.json()["error"]["details"].values())
        # a rank other than the adapter's: continuing the adapter keeps its own
        done = train(api, sft_body(file_id, steps=2, model=model_id, lora_rank=original_rank * 2))
    again = export(backend, done["fine_tuned_model"], tmp_path / "continued")
    assert again.exit_code == 0, again.stderr
    assert again.json()["format"] == "peft_adapter" and again.json()["base_model"] == "synth-ai/tiny-qwen3"
    continued = json.loads((Path(again.json()["out"]) / "adapter_config.json").read_text())
    assert continued["r"] == original_rank


def test_a_full_folder_imports_with_its_base_named(backend, tmp_path):
    exported = export(backend, TINY_TEXT, tmp_path / "full")
    assert exported.exit_code == 0, exported.stderr
    unnamed = run_cli("--json", "models", "import", str(tmp_path / "full"), "--backend", backend.url)
    assert unnamed.exit_code == 3 and "--base" in unnamed.json()["error"]["message"]
    named = run_cli("--json", "models", "import", str(tmp_path / "full"), "--base", TINY_TEXT, "--name", "copy",
                    "--backend", backend.url)
    assert named.exit_code == 0, named.stderr
    assert named.json()["id"] == "imported:synth-ai/tiny-qwen3:copy" and named.json()["training"] == "full"
    text, _ = backend_reply(backend, "imported:synth-ai/tiny-qwen3:copy")
    assert text == backend_reply(backend, TINY_TEXT)[0]  # the same weights answer the same


def test_a_qwen3_vl_export_carries_its_processor_files(tiny_models, tmp_path):
    from transformers import Qwen3VLForConditionalGeneration
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    from backend_support import TINY_VL, link_tiny
    from synth_ai.backend.store.model_export import build_export, exports_root
    from synth_ai.backend.store.model_store import ModelStore

    link_tiny(tmp_path / "data", tiny_models)
    store = ModelStore(tmp_path / "data")
    manifest = build_export(store, TINY_VL)
    folder = exports_root(store) / manifest["id"] / "files"
    names = {f["path"] for f in manifest["files"]}
    assert {"config.json", "model.safetensors", "preprocessor_config.json", "tokenizer.json", "chat_template.jinja",
            "generation_config.json"} <= names
    source = store.resolve(TINY_VL)
    assert (folder / "preprocessor_config.json").read_bytes() == (source / "preprocessor_config.json").read_bytes()
    assert all(hashlib.sha256((folder / f["path"]).read_bytes()).hexdigest() == f["sha256"] for f in manifest["files"])
    model = Qwen3VLForConditionalGeneration.from_pretrained(str(folder))
    assert model.config.vision_config is not None
    processor = Qwen2VLImageProcessorPil.from_pretrained(str(folder))
    assert processor.merge_size == json.loads((source / "preprocessor_config.json").read_text())["merge_size"]
    assert build_export(store, TINY_VL)["id"] == manifest["id"]  # prepared once, reused


def _docs_snippet(**folders: Path) -> str:
    """docs/models.md's Python block, with the folders it names replaced by `folders` (name -> path)."""
    from conftest import REPO_ROOT

    text = (REPO_ROOT / "docs" / "models.md").read_text()
    (code,) = re.findall(r"^```python\n(.*?)^```", text, re.S | re.M)
    for name, path in folders.items():
        assert f'"./{name}"' in code, name
        code = code.replace(f'"./{name}"', repr(str(path)))
    return code


def _printed(code: str) -> str:
    import io
    from contextlib import redirect_stdout

    printed = io.StringIO()
    with redirect_stdout(printed):
        exec(compile(code, "docs/models.md", "exec"), {})  # noqa: S102 - the documented snippet, run as written
    return printed.getvalue().strip()


def test_the_docs_snippet_answers_like_the_backend_without_a_thinking_block_first(backend, lora_model, tmp_path):
    with backend.client() as api:
        file_id = upload(api, chat_jsonl(tmp_path / "train.jsonl", n=8)).json()["id"]
        full_model = train(api, sft_body(file_id, steps=12, learning_rate=5e-3))["fine_tuned_model"]
        reply = api.post("/inference/v1/chat/completions", json={
            "model": full_model, "messages": PROMPT, "temperature": 0, "max_tokens": 32}, timeout=120)
    assert reply.status_code == 200, reply.text
    for model_id, out in ((full_model, tmp_path / "pirate-full"), (lora_model, tmp_path / "pirate")):
        assert export(backend, model_id, out).exit_code == 0
    code = _docs_snippet(**{"pirate-full": tmp_path / "pirate-full", "pirate": tmp_path / "pirate"})
    assert f"[{{\"role\": \"user\", \"content\": \"{PROMPT[0]['content']}\"}}]" in code
    answer = _printed(code)
    assert not answer.startswith(("<think>", "</think>")), answer
    assert answer == reply.json()["choices"][0]["message"]["content"].strip()
    # Why the flag is there: the fine-tuned model writes the empty thinking block itself without it.
    plain = code.replace(", enable_thinking=False", "")
    assert plain != code and _printed(plain).startswith("<think>")
