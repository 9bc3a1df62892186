"""`servekit sim serve`: a live OpenAI/vLLM-compatible server over the simulator (shell).

Endpoints: `POST /v1/chat/completions`, `POST /v1/completions` (streamed or not),
`GET /v1/models`, `GET /health`, `GET /version`, `POST /tokenize`, `POST /detokenize`,
`GET /metrics`. Answers come from `textgen` (deterministic text, reasoning, tool calls);
their timing comes from the simulated engine, one streamed chunk per engine step.

Length semantics: with `max_tokens` the simulator always generates exactly that many tokens
(finish_reason "length"), as if `ignore_eos` were set; a complete tool call ends earlier
("tool_calls"). Without `max_tokens` an answer is 256 tokens (at least `min_tokens`, at most
the context left) and ends with "stop"; `/v1/completions` defaults to 16 like vLLM.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Callable

from aiohttp import web

from servekit.errors import SimulationError
from servekit.hardware import lookup_gpu
from servekit.plan import make_plan, plan_inputs
from servekit.profiles.schema import Profile
from servekit.sim._handlers import SHUTDOWN_GRACE_S, Log, SimServer, log_to_stderr
from servekit.sim._pacing import stamp_arrival, yield_to_engine
from servekit.sim._respond import MAX_BODY_BYTES
from servekit.sim.faults import Faults
from servekit.sim.startup_lines import (
    StartupFacts,
    loaded_lines,
    loading_lines,
    serving_lines,
    startup_facts,
)
from servekit.sim.textgen import PLAIN_TEXT, TokenText

# aiohttp's own per-connection shutdown wait; `SimServer.shutdown` has already cut every
# request after SHUTDOWN_GRACE_S by then, so it is a backstop, not a delay.
SHUTDOWN_TIMEOUT_S = 0.5


def make_app(
    profile: Profile,
    *,
    seed: int = 0,
    time_scale: float = 1.0,
    faults: Faults | None = None,
    log: Log = log_to_stderr,
    shutdown_grace_s: float = SHUTDOWN_GRACE_S,
    enable_prompt_tokens_details: bool = False,
    token_text: TokenText = PLAIN_TEXT,
) -> web.Application:
    """Build the simulated server's aiohttp application (serve it with `make_runner`).

    Args:
        profile: the deployment to simulate (engine limits, KV pool, served model name).
        seed: seeds the engine's acceptance draws, sampled requests and dropped streams.
        time_scale: wall seconds per simulated second (0.1 runs ten times faster).
        faults: faults to inject; `slow-start` here gives only the /health 503 phase.
        log: where server log lines go (stderr by default).
        shutdown_grace_s: on shutdown, seconds in-flight requests get before they are cut.
        enable_prompt_tokens_details: as vLLM's flag, report usage
            `prompt_tokens_details` (the prompt tokens the prefix cache served).
        token_text: how generated tokens decode: a share that decodes to nothing and a
            share that starts a two-token character (default: every token has its text).

    Raises:
        SimulationError: time_scale is not positive, or the profile cannot be simulated.
    """
    if not time_scale > 0:
        raise SimulationError(f"time_scale {time_scale} must be positive", fix="use e.g. 1.0")
    server = SimServer(
        profile, seed=seed, time_scale=time_scale, faults=faults or Faults(), log=log,
        shutdown_grace_s=shutdown_grace_s,
        enable_prompt_tokens_details=enable_prompt_tokens_details, token_text=token_text,
    )  # fmt: skip
    app = web.Application(
        middlewares=[stamp_arrival, server.tracked, server.errors, yield_to_engine(server.live)],
        client_max_size=MAX_BODY_BYTES,
    )
    app.cleanup_ctx.append(server.lifecycle)
    app.on_shutdown.append(server.shutdown)
    app.router.add_post("/v1/chat/completions", server.chat)
    app.router.add_post("/v1/completions", server.completions)
    app.router.add_get("/v1/models", server.models)
    app.router.add_get("/health", server.health)
    app.router.add_get("/version", server.version)
    app.router.add_post("/tokenize", server.tokenize)
    app.router.add_post("/detokenize", server.detokenize)
    app.router.add_get("/metrics", server.metrics_text)
    return app


def make_runner(app: web.Application) -> web.AppRunner:
    """The runner for a simulated server's app.

    A handler is cancelled when its client disconnects (aiohttp does not do this by
    default), which aborts its request in the engine as vLLM does.
    """
    return web.AppRunner(
        app,
        access_log=None,
        handle_signals=False,
        shutdown_timeout=SHUTDOWN_TIMEOUT_S,
        handler_cancellation=True,
    )


def oom_lines(profile: Profile) -> list[str]:
    """The log lines of an engine that ran out of GPU memory while loading the model."""
    total_gib = lookup_gpu(profile.hardware.gpu).cuda_visible_mib / 1024
    free_gib = total_gib * 0.013
    return [
        "ERROR [core.py] EngineCore failed to start.",
        "Traceback (most recent call last):",
        '  File "vllm/v1/worker/gpu_model_runner.py", line 2214, in load_model',
        "    self.model = model_loader.load_model(vllm_config=self.vllm_config)",
        f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a "
        f"total capacity of {total_gib:.2f} GiB of which {free_gib:.2f} GiB is free. Including "
        f"non-PyTorch memory, this process has {total_gib - free_gib:.2f} GiB memory in use. "
        "If reserved but unallocated memory is large try setting "
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.",
        "RuntimeError: Engine core initialization failed. See root cause above.",
    ]


def _startup_facts(profile: Profile) -> StartupFacts:
    """The figures the startup log reports: the plan the simulator sizes its KV pool with."""
    gpu = lookup_gpu(profile.hardware.gpu)
    plan = make_plan(plan_inputs(profile, gpu))
    return startup_facts(profile, plan, device_name=gpu.device_name)


def _url(host: str, port: int) -> str:
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


async def serve_async(
    profile: Profile,
    *,
    stop: asyncio.Event,
    host: str = "127.0.0.1",
    port: int = 8000,
    seed: int = 0,
    time_scale: float = 1.0,
    faults: Faults | None = None,
    announce: Callable[[str], None] = log_to_stderr,
    log: Log = log_to_stderr,
    enable_prompt_tokens_details: bool = False,
    token_text: TokenText = PLAIN_TEXT,
) -> None:
    """Serve a simulated deployment until `stop` is set.

    The start is logged as vLLM 0.32 logs it (`sim.startup_lines`), with the figures of
    the plan the simulator runs with: model loading, memory profiling, the KV cache and
    its capacity, CUDA graphs, then the API server. With `slow-start` the port does not
    listen for that long (scaled), which the log shows as weights loading, then /health
    answers 503 for a fifth of it; with `oom-at-startup` the out-of-memory log is written
    and SimulationError raised without listening.

    Args:
        profile: the deployment to simulate.
        stop: set it to shut the server down.
        host: address to listen on.
        port: TCP port; 0 picks a free one (the announced URL names it).
        seed: seeds the engine, sampled requests and dropped streams.
        time_scale: wall seconds per simulated second.
        faults: faults to inject.
        announce: receives `servekit sim: serving <profile> on <url>` once listening.
        log: receives server log lines.
        enable_prompt_tokens_details: report usage `prompt_tokens_details` (vLLM's flag).
        token_text: how generated tokens decode (`make_app`).

    Raises:
        SimulationError: the engine "ran out of memory", the port cannot be bound, or the
            profile cannot be simulated.
    """
    faults = faults or Faults()
    if not time_scale > 0:
        raise SimulationError(f"time_scale {time_scale} must be positive", fix="use e.g. 1.0")
    facts = _startup_facts(profile)
    loop = asyncio.get_running_loop()
    began = loop.time()
    for line in loading_lines(facts):
        log(line)
    if faults.slow_start_s:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), faults.slow_start_s * time_scale)
        if stop.is_set():
            return
    if faults.oom_at_startup:
        for line in oom_lines(profile):
            log(line)
        raise SimulationError(
            "the simulated engine ran out of GPU memory while loading (--fault oom-at-startup)",
            fix="drop --fault oom-at-startup",
        )
    app = make_app(
        profile, seed=seed, time_scale=time_scale, faults=faults, log=log,
        enable_prompt_tokens_details=enable_prompt_tokens_details, token_text=token_text,
    )  # fmt: skip
    for line in loaded_lines(facts, load_s=loop.time() - began):
        log(line)
    runner = make_runner(app)
    await runner.setup()
    try:
        try:
            await web.TCPSite(runner, host, port).start()
        except OSError as exc:
            raise SimulationError(
                f"cannot listen on {host}:{port}: {exc.strerror or exc}",
                fix="choose another --port or stop the process that holds it",
            ) from None
        bound = runner.addresses[0][1]
        for line in serving_lines(_url(host, bound)):
            log(line)
        announce(f"servekit sim: serving {profile.name} on {_url(host, bound)}")
        await stop.wait()
    finally:
        await runner.cleanup()


def serve(
    profile: Profile,
    host: str = "127.0.0.1",
    port: int = 8000,
    *,
    seed: int = 0,
    time_scale: float = 1.0,
    faults: Faults | None = None,
    announce: Callable[[str], None] = log_to_stderr,
    log: Log = log_to_stderr,
    enable_prompt_tokens_details: bool = False,
    token_text: TokenText = PLAIN_TEXT,
) -> None:
    """Serve a simulated deployment until SIGINT or SIGTERM (see `serve_async`).

    Raises:
        SimulationError: as `serve_async`.
    """

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await serve_async(
            profile, stop=stop, host=host, port=port, seed=seed, time_scale=time_scale,
            faults=faults, announce=announce, log=log,
            enable_prompt_tokens_details=enable_prompt_tokens_details, token_text=token_text,
        )  # fmt: skip

    asyncio.run(main())
