"""validate's results and transcripts lose the run's secrets, whatever the server echoes."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from servekit.client.mock import MockRequest, MockResponse, MockTransport
from servekit.redaction import redactor_of
from servekit.validate.context import ValidateSpec
from servekit.validate.runner import run_checks, validate_document

KEY = "sk-echoed-0123456789"


async def echo(request: MockRequest) -> MockResponse:
    """A server that names the model after the Authorization header and refuses every chat
    with the header in its error message."""
    said = request.headers.get("Authorization", "")
    if request.path == "/health":
        return MockResponse(200)
    if request.path == "/v1/models":
        return MockResponse.json({"data": [{"id": f"m {said}", "max_model_len": 9}]})
    return MockResponse.json({"error": {"message": f"no: {said}"}}, status=401)


def test_check_details_data_and_transcripts_hold_no_echoed_key(tmp_path: Path) -> None:
    """The key the server echoes into /v1/models and its errors is in no result's detail or
    data, not in validate.json's checks and not in transcripts.jsonl."""
    spec = ValidateSpec("http://fake:1", headers={"Authorization": f"Bearer {KEY}"},
                        redactor=redactor_of([KEY]), ladder=(1,))  # fmt: skip
    results = asyncio.run(run_checks(spec, out=tmp_path, transport=MockTransport(echo)))
    document = json.dumps(validate_document(results, spec).as_json())
    transcripts = (tmp_path / "transcripts.jsonl").read_text(encoding="utf-8")
    assert "[REDACTED]" in document
    assert "[REDACTED]" in transcripts
    assert KEY not in document
    assert KEY not in transcripts
    assert all(json.loads(line) for line in transcripts.splitlines())
