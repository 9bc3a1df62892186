"""The documents servekit writes, as frozen typed models (core): one module per document.

`summary` (summary.json of a bench or sim run), `compare` (`compare --json`), `plan`
(`plan --json`), `validate` (`validate --json` and validate.json); the per-request record is
`servekit.records.RequestRecord`. Each document carries `schema_version`; `schemas` writes
their JSON Schemas to docs/schemas/.
"""

from servekit.results._base import Document, DocumentError

__all__ = ["Document", "DocumentError"]
