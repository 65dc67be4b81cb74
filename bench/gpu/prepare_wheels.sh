#!/usr/bin/env bash
# Download the wheels the GPU kit carries to the GPU machine into bench/gpu/wheels/ (git-ignored; 64 MiB cap).
#
# The GPU machine (Python 3.12, manylinux x86_64, no network) already has torch, transformers, peft, accelerate,
# safetensors, tokenizers, huggingface_hub, httpx, typer, rich, numpy, pandas, pyarrow, xxhash, uvloop, click, h11,
# anyio and annotated-doc. What it lacks and the kit imports:
# - pydantic (+ core, annotated-types, typing-inspection, a newer typing-extensions): our config models, read by
#   both trainers' settings;
# - fastapi, starlette, uvicorn, opentelemetry-api, python-multipart: the GSPO bench's task app (served over HTTP,
#   as in a real job);
# - python-dotenv, msgspec, pybase64, sniffio: imported by synth_ai's data readers and HTTP client paths;
# - trl with datasets (+ dill, multiprocess, and the fsspec that datasets accepts): the baseline.
# Left out on purpose: pynacl (needs cffi, which the machine lacks; only sealed-box key uploads use it), httptools
# (optional for uvicorn), vllm (gigabytes; the kit measures the built-in engine).
# The versions are the ones the dev venv runs the tests with (trl 1.16.0 is pyproject's `bench` extra);
# datasets 4.8.5 rather than 5.x because it accepts pyarrow >= 21 (the machine's pyarrow version is not known).
set -euo pipefail
cd "$(dirname "$0")"
PYTHON="${PYTHON:-python3}"
DEST="wheels"
rm -rf "$DEST"
mkdir -p "$DEST"
"$PYTHON" -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d "$DEST" \
  pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5 \
  typing-extensions==4.16.0 \
  fastapi==0.165.0 starlette==1.10.0 uvicorn==0.54.0 opentelemetry-api==1.45.2 python-multipart==0.0.34 \
  python-dotenv==1.2.4 msgspec==0.22.0 pybase64==1.5.1 sniffio==1.3.1 \
  trl==1.16.0 datasets==4.8.5 dill==0.4.1 multiprocess==0.70.19 fsspec==2026.2.0
count=$(ls "$DEST"/*.whl | wc -l)
size=$(du -sm "$DEST" | cut -f1)
echo "prepare_wheels: $count wheels, ${size} MiB in bench/gpu/$DEST"
if [ "$size" -gt 48 ]; then
  echo "prepare_wheels: over 48 MiB; with the working tree that risks the 64 MiB carry limit" >&2
  exit 1
fi
