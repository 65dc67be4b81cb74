"""The synth-ai command line: thin commands over the SDK, one error boundary, one output sink."""
