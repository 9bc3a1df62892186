"""The published JSON Schemas: in step with the models, and what every --json command prints."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from click.testing import CliRunner

from servekit.cli.main import cli
from servekit.schemas import schema_documents, schema_text

SCHEMAS = Path(__file__).resolve().parents[2] / "docs" / "schemas"
PROFILE = "minimax-m3-mxfp8-8xa800"


def _schema(name: str) -> dict[str, Any]:
    return dict(json.loads((SCHEMAS / name).read_text(encoding="utf-8")))


def _check(name: str, doc: object) -> None:
    """Validate `doc` against docs/schemas/NAME (draft 2020-12)."""
    schema = _schema(name)
    jsonschema.Draft202012Validator.check_schema(schema)
    jsonschema.Draft202012Validator(schema).validate(doc)


def _run(*args: str) -> dict[str, Any]:
    result = CliRunner().invoke(cli, [*args, "--json"])
    assert result.exit_code == 0, result.stderr
    return dict(json.loads(result.stdout))


def test_checked_in_schemas_match_the_models() -> None:
    """docs/schemas/ holds exactly what the models generate (regenerate: python -m
    servekit.schemas)."""
    generated = schema_documents()
    assert sorted(p.name for p in SCHEMAS.glob("*.json")) == sorted(generated)
    for name, schema in generated.items():
        assert (SCHEMAS / name).read_text(encoding="utf-8") == schema_text(schema), name


def test_schemas_reject_an_unknown_key_and_a_missing_one() -> None:
    """The summary schema is strict: an extra key or a dropped required key fails."""
    schema = _schema("summary.schema.json")
    good = {"schema_version": 1, "servekit_version": "x", "started_at": "t",
            "target": {"url": None, "model": None, "server_version": None, "profile": None},
            "workload": {"input_len": 1, "output_len": 1, "temperature": 0.0,
                         "requests_per_point": 1, "seed": 0}, "points": []}  # fmt: skip
    jsonschema.validate(good, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**good, "surprise": 1}, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({k: v for k, v in good.items() if k != "target"}, schema)


@pytest.mark.integration
def test_cli_json_outputs_match_the_schemas(
    start_server: Callable[..., tuple[object, str]], tmp_path: Path
) -> None:
    """bench, sim run, plan, validate and compare --json, summary.json, validate.json and
    records.jsonl all validate against their published schemas, with schema_version 1."""
    url = start_server()[1]
    bench = _run("bench", "--url", url, "--concurrency", "2", "--requests-per-point", "4",
                 "--warmup", "0", "--input-len", "16", "--output-len", "8",
                 "--out", str(tmp_path / "bench"))  # fmt: skip
    _check("summary.schema.json", bench)
    assert json.loads((tmp_path / "bench" / "summary.json").read_text(encoding="utf-8")) == bench
    for line in (tmp_path / "bench" / "records.jsonl").read_text(encoding="utf-8").splitlines():
        _check("record.schema.json", json.loads(line))
    sim = _run("sim", "run", "--profile", PROFILE, "--concurrency", "2", "--requests-per-point",
               "4", "--output-len", "8", "--out", str(tmp_path / "sim"))  # fmt: skip
    _check("summary.schema.json", sim)
    validate = _run("validate", "--url", url, "--only", "health,chat,ladder", "--ladder", "1,2",
                    "--out", str(tmp_path / "validate"))  # fmt: skip
    _check("validate.schema.json", validate)
    _check(
        "validate.schema.json", json.loads((tmp_path / "validate" / "validate.json").read_text())
    )
    plan = _run("plan", PROFILE)
    _check("plan.schema.json", plan)
    compare = _run("compare", str(tmp_path / "bench"), str(tmp_path / "sim"))
    _check("compare.schema.json", compare)
    for doc in (bench, sim, validate, plan, compare):
        assert doc["schema_version"] == 1
    assert next(iter(bench)) == "schema_version"
    # optional keys are absent, not null: only a real server has a /v1/models entry
    assert "model_info" in bench["target"]
    assert "model_info" not in sim["target"]
    assert "api" in bench["workload"]
    assert sim["workload"]["simulated"] is True
    assert "simulated" not in bench["workload"]
