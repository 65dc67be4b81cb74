"""Which values are secrets, how to mask one, and how to scrub them out of text.

One helper for one concern: every place that shows a key (CLI output, logs, dry-run headers, stored traces,
`/debug/env`) calls `mask_secret`, and every sink that prints free text passes it through `redact`.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False  # annotations only: `collections` is not loaded at start-up
if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

# Environment variables whose values are credentials.
SECRET_ENV_NAMES: tuple[str, ...] = (
    "SYNTH_API_KEY",
    "ENVIRONMENT_API_KEY",
    "DEV_ENVIRONMENT_API_KEY",
    "dev_environment_api_key",
    "ENVIRONMENT_API_KEY_ALIASES",
    "OPENAI_API_KEY",
    "GROQ_API_KEY",
    "GEMINI_API_KEY",
    "DEV_SYNTH_API_KEY",
    "PROD_SYNTH_API_KEY",
    "TESTING_PROD_SYNTH_API_KEY",
    "TESTING_LOCAL_SYNTH_API_KEY",
    "MODAL_TOKEN_ID",
    "MODAL_TOKEN_SECRET",
    "TURSO_AUTH_TOKEN",
    "HF_TOKEN",
)

# Words that make any variable a secret, in any case (matched without `re`: the CLI's start-up skips importing it).
_SECRET_NAME_WORDS = ("api_key", "token", "secret", "password")

# Shorter values are not scrubbed from free text: they would match ordinary words.
_MIN_REDACT_LENGTH = 8


def is_secret_name(name: str) -> bool:
    if name in SECRET_ENV_NAMES:
        return True
    folded = name.casefold()
    return any(word in folded for word in _SECRET_NAME_WORDS)


def mask_secret(value: str | None) -> str:
    """Show enough of a key to recognise it, never enough to use it: `sk_l…9f`."""
    if not value:
        return "<unset>"
    if len(value) <= 8:
        return "****"
    return f"{value[:4]}…{value[-2:]}"


def secret_values(environ: Mapping[str, str] | None = None) -> list[str]:
    """Every secret value currently in the environment, longest first (so overlapping keys scrub fully)."""
    env = os.environ if environ is None else environ
    values: set[str] = set()
    for name, value in env.items():
        if not value or not is_secret_name(name):
            continue
        for part in value.split(","):  # ENVIRONMENT_API_KEY_ALIASES is a CSV
            part = part.strip()
            if len(part) >= _MIN_REDACT_LENGTH:
                values.add(part)
    return sorted(values, key=len, reverse=True)


def redact(text: str, secrets: Iterable[str] | None = None) -> str:
    """Replace every occurrence of a known secret in `text` by its mask."""
    for secret in secret_values() if secrets is None else secrets:
        if secret and secret in text:
            text = text.replace(secret, mask_secret(secret))
    return text
