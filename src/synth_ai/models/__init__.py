"""Model registry."""
