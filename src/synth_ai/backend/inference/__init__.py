"""OpenAI-compatible chat completions over base and fine-tuned models (`engine.InferenceEngine`)."""
