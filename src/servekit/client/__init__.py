"""The only HTTP client (shell): SSE parsing, OpenAI stream interpretation, timed requests."""
