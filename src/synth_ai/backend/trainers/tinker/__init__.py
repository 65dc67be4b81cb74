"""The `tinker` job kind: a Tinker SDK training client served by a job worker (docs/tinker.md)."""
