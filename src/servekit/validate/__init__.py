"""`servekit validate` (shell): the functional gate for an OpenAI-compatible endpoint."""
