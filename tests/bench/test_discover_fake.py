"""bench's server discovery against an in-process fake server (a `MockTransport`)."""

from __future__ import annotations

import asyncio

import pytest

from servekit.bench.summary import discover
from servekit.client.mock import MockRequest, MockResponse, MockTransport
from servekit.client.transport import ConnectFailed
from servekit.errors import EndpointError

BASE = "http://fake:8000"


async def vllm(request: MockRequest) -> MockResponse:
    """/v1/models with one model and /version."""
    if request.path == "/v1/models":
        entry = {"id": "m", "max_model_len": 8192, "owned_by": "vllm", "permission": []}
        return MockResponse.json({"object": "list", "data": [entry]})
    if request.path == "/version":
        return MockResponse.json({"version": "0.26.0"})
    return MockResponse(404)


def test_discover_reads_models_and_version() -> None:
    """The first model's id, max_model_len and known fields, and the version; the API key
    goes with both requests."""
    transport = MockTransport(vllm)
    info = asyncio.run(discover(BASE, {"Authorization": "Bearer k"}, transport=transport))
    assert (info.model, info.max_model_len, info.version) == ("m", 8192, "0.26.0")
    assert info.model_entry == {"id": "m", "max_model_len": 8192, "owned_by": "vllm"}
    assert [r.path for r in transport.requests] == ["/v1/models", "/version"]
    assert all(r.headers["Authorization"] == "Bearer k" for r in transport.requests)


def test_discover_without_version() -> None:
    """A server without /version is still discovered, with no version."""

    async def no_version(request: MockRequest) -> MockResponse:
        return MockResponse(404) if request.path == "/version" else await vllm(request)

    info = asyncio.run(discover(BASE, {}, transport=MockTransport(no_version)))
    assert info.version is None


def test_unreachable_and_empty_servers_are_endpoint_errors() -> None:
    """A refused connection is the transport's line with the fix; a 401 or an empty list
    says `lists no model`."""

    async def refused(request: MockRequest) -> MockResponse:
        raise ConnectFailed("ClientConnectorError", "cannot connect to x: connection refused")

    async def unauthorized(request: MockRequest) -> MockResponse:
        return MockResponse.json({"error": {"message": "no key"}}, status=401)

    async def empty(request: MockRequest) -> MockResponse:
        return MockResponse.json({"data": []})

    with pytest.raises(EndpointError, match=r"^cannot connect to x: connection refused; is the"):
        asyncio.run(discover(BASE, {}, transport=MockTransport(refused)))
    for handler in (unauthorized, empty):
        with pytest.raises(EndpointError, match="lists no model"):
            asyncio.run(discover(BASE, {}, transport=MockTransport(handler)))
