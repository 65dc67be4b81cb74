"""What the embedded backend keeps on disk: the SQLite database and its migrations (`db`), job records with their
events, metrics and timeline (`job_records`), uploaded files (`files`, `blobs`), idempotency records, the sealed-box
key pair, and where model weights are found (`model_store`)."""
