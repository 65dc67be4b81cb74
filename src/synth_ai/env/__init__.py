"""Environment: .env files, secrets and masking, backend URL resolution."""
