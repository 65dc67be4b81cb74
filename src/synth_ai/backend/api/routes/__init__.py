"""HTTP routes of the embedded backend, one module per resource (all mounted under `/api`)."""
