"""`servekit validate`: the functional gate for an OpenAI-compatible endpoint."""
