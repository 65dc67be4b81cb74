"""The HTTP client of the Synth learning API: one transport, thin typed resources."""
