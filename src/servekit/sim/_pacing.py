"""How the live simulator keeps its own request handling off the engine's clock (shell).

The engine driver and the HTTP handlers share one event loop. A burst of requests (a
thousand streams opening at once) would otherwise parse and tokenize every prompt in one
loop iteration, seconds of work during which no engine step ends on time; and the time a
request spends being parsed would count as engine time. In vLLM the engine core runs in its
own process and neither happens. Two middlewares restore that:

- `stamp_arrival` records when each request arrived (`ARRIVED_S`), before its body is read,
  so an idle engine's simulated clock starts at the arrival (see `sim._live_engine`).
- `yield_to_engine` reads a request's body, then holds its handling back while the engine
  driver is due and the engine has requests waiting, so the driver is late by at most one
  handler's work however many requests are queued, yet an engine that runs out of waiting
  requests is fed first.
"""

from __future__ import annotations

import asyncio

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

from servekit.sim._live_engine import ARRIVED_S, LiveEngine
from servekit.sim._respond import read_body


@web.middleware
async def stamp_arrival(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Stamp the loop time the request arrived at (headers read, body not yet parsed)."""
    ARRIVED_S.set(asyncio.get_running_loop().time())
    return await handler(request)


def yield_to_engine(live: LiveEngine) -> Middleware:
    """A middleware that handles a POST only while `live` does not defer arrivals.

    The body is read first: its bytes may arrive after the headers, and a handler that
    waited for them would otherwise go on to parse past the driver's deadline. GETs
    (`/health`, `/metrics`) are cheap and never wait, so a server behind its engine schedule
    still answers them. Raises HttpError (413) for a body over the limit.
    """

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.method == "POST":
            await read_body(request)
            await live.wait_to_parse()
        return await handler(request)

    return middleware
