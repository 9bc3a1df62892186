"""The only code that talks to a server (shell): one seam over an injectable transport.

`endpoint.Endpoint` is the API bench, validate and discovery use: health, models, version,
tokenize, /metrics text and the timed stream (`http.py` documents the timestamps). It speaks
to a `transport.Transport`: `aiohttp_transport` is the real one (the one place sessions are
configured) and `mock.MockTransport` an in-process fake server for tests. `probe` holds the
synchronous probes of `servekit up/status`, `download` fetches small files, `urls` parses
URLs; `sse` and `stream` parse the event stream (pure). Importing this package imports none
of them, so commands that do not talk to a server do not load aiohttp.
"""
