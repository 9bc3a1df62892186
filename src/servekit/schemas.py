"""The JSON Schemas of servekit's documents, generated from the models (shell: writes files).

`python -m servekit.schemas [DIR]` writes them to DIR (docs/schemas/ by default);
tests/results/test_schemas.py fails when the checked-in files drift from the models.
"""

from __future__ import annotations

import sys
from pathlib import Path

from pydantic import BaseModel, JsonValue, TypeAdapter

from servekit import jsontext
from servekit.records import RequestRecord
from servekit.results.compare import Comparison
from servekit.results.plan import PlanDocument
from servekit.results.run_info import RunInfo
from servekit.results.summary import Summary
from servekit.results.tune import TuneDocument
from servekit.results.validate import ValidateDocument

DOCS: dict[str, type[BaseModel]] = {
    "summary.schema.json": Summary,
    "plan.schema.json": PlanDocument,
    "validate.schema.json": ValidateDocument,
    "compare.schema.json": Comparison,
    "run.schema.json": RunInfo,
    "tune.schema.json": TuneDocument,
}
RECORD_FILE = "record.schema.json"


def schema_documents() -> dict[str, dict[str, JsonValue]]:
    """Every published schema by file name, as JSON values."""
    out: dict[str, dict[str, JsonValue]] = {}
    for name, model in DOCS.items():
        out[name] = _with_header(name, model.model_json_schema())
    out[RECORD_FILE] = _with_header(RECORD_FILE, TypeAdapter(RequestRecord).json_schema())
    return out


def schema_text(schema: dict[str, JsonValue]) -> str:
    """A schema as the checked-in file holds it."""
    return jsontext.dumps(schema, indent=2, what="a JSON Schema") + "\n"


def write_schemas(directory: Path) -> list[Path]:
    """Write every schema into `directory`; return the files written."""
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for name, schema in schema_documents().items():
        path = directory / name
        path.write_text(schema_text(schema), encoding="utf-8")
        written.append(path)
    return written


def _with_header(name: str, schema: dict[str, JsonValue]) -> dict[str, JsonValue]:
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$comment": f"generated from the models: python -m servekit.schemas ({name})",
        **schema,
    }


def main(argv: list[str]) -> int:
    """Write the schemas to argv[0] or docs/schemas/ under the current directory."""
    directory = Path(argv[0]) if argv else Path("docs/schemas")
    for path in write_schemas(directory):
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
