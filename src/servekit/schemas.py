"""The JSON Schemas of servekit's documents, generated from the models (shell: writes files).

`python -m servekit.schemas [DIR]` writes them to DIR (docs/schemas/ by default);
tests/results/test_schemas.py fails when the checked-in files drift from the models.
"""

from __future__ import annotations

import sys
from pathlib import Path

from pydantic import BaseModel, JsonValue, TypeAdapter

from servekit import jsontext
from servekit.doctor.documents import DoctorDocument, LogAnalysisDocument
from servekit.profiles.documents import ProfileDocument
from servekit.records import RequestRecord
from servekit.render.documents import ImageBuildDocument, RenderDocument
from servekit.results.compare import Comparison
from servekit.results.demo import DemoDocument
from servekit.results.plan import PlanDocument
from servekit.results.profiles import GpusDocument, ProfilesDocument
from servekit.results.report import ReportDocument
from servekit.results.run_info import RunInfo
from servekit.results.sim_serve import ListeningEvent
from servekit.results.summary import Summary
from servekit.results.tune import TuneDocument
from servekit.results.validate import ValidateDocument
from servekit.runtime.documents import DownDocument, StatusDocument, UpDocument
from servekit.sim.fit_document import SimFitDocument

DOCS: dict[str, type[BaseModel]] = {
    "summary.schema.json": Summary,
    "plan.schema.json": PlanDocument,
    "validate.schema.json": ValidateDocument,
    "compare.schema.json": Comparison,
    "run.schema.json": RunInfo,
    "tune.schema.json": TuneDocument,
    "doctor.schema.json": DoctorDocument,
    "logs-analyze.schema.json": LogAnalysisDocument,
    "render.schema.json": RenderDocument,
    "image-build.schema.json": ImageBuildDocument,
    "report.schema.json": ReportDocument,
    "demo.schema.json": DemoDocument,
    "sim-fit.schema.json": SimFitDocument,
    "sim-serve.schema.json": ListeningEvent,
    "up.schema.json": UpDocument,
    "status.schema.json": StatusDocument,
    "down.schema.json": DownDocument,
    "profiles-list.schema.json": ProfilesDocument,
    "profiles-show.schema.json": ProfileDocument,
    "profiles-gpus.schema.json": GpusDocument,
}
RECORD_FILE = "record.schema.json"
# The document each command's --json prints, by the command's words (tests/results/
# test_schemas.py runs every command of the command table that has --json against it).
COMMAND_DOCUMENTS: dict[str, str] = {
    "bench": "summary.schema.json",
    "compare": "compare.schema.json",
    "demo": "demo.schema.json",
    "doctor": "doctor.schema.json",
    "down": "down.schema.json",
    "image build": "image-build.schema.json",
    "logs analyze": "logs-analyze.schema.json",
    "plan": "plan.schema.json",
    "profiles gpus": "profiles-gpus.schema.json",
    "profiles list": "profiles-list.schema.json",
    "profiles show": "profiles-show.schema.json",
    "render": "render.schema.json",
    "report": "report.schema.json",
    "sim fit": "sim-fit.schema.json",
    "sim run": "summary.schema.json",
    "sim serve": "sim-serve.schema.json",
    "status": "status.schema.json",
    "tune": "tune.schema.json",
    "up": "up.schema.json",
    "validate": "validate.schema.json",
}


def schema_documents() -> dict[str, dict[str, JsonValue]]:
    """Every published schema by file name, as JSON values."""
    out: dict[str, dict[str, JsonValue]] = {}
    for name, model in DOCS.items():
        out[name] = _with_header(name, model.model_json_schema())
    out[RECORD_FILE] = _with_header(RECORD_FILE, TypeAdapter(RequestRecord).json_schema())
    return out


def check_command_output(command: str, text: str) -> dict[str, JsonValue]:
    """Parse a command's `--json` output and check it against its document's schema
    (`COMMAND_DOCUMENTS`) and its model; return it (for tests and scripts).

    Raises:
        KeyError: `command` prints no document.
        jsonschema.ValidationError: the output does not match the schema.
        pydantic.ValidationError: the model refuses it.
    """
    import json

    import jsonschema

    name = COMMAND_DOCUMENTS[command]
    document = json.loads(text)
    schema = _with_header(name, DOCS[name].model_json_schema())  # this one, not all of them
    jsonschema.Draft202012Validator(schema).validate(document)
    DOCS[name].model_validate(document)
    return dict(document)


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
