"""The only HTTP client: SSE parsing (pure), OpenAI stream interpretation, timed requests."""
