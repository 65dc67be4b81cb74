"""The embedded backend: a local implementation of the Synth learning API (server, jobs, trainers, inference)."""
