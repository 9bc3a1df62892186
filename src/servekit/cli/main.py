"""The `servekit` command group (shell): one thin module per command, imported on demand.

`servekit --help` lists the commands from the table below without importing them, so a
cheap command never pays for matplotlib, aiohttp or numpy. The group is also the one place
a `ServekitError` becomes `servekit: error: <message>; <fix>` on stderr and its exit code.
"""

from __future__ import annotations

import importlib
from typing import NamedTuple

import click

from servekit.errors import ChecksFailed, ServekitError


class Entry(NamedTuple):
    """Where a command lives, and its help's first paragraph for the command list."""

    module: str
    attr: str
    summary: str


COMMANDS: dict[str, Entry] = {
    "bench": Entry("bench", "bench_command", "Load-test a server: exact streaming timing, "
                   "per-request records, summary per point."),
    "compare": Entry("compare", "compare_command", "Compare two runs (EAGLE3 on against off, "
                     "say): deltas per load, crossover, advice."),
    "demo": Entry("demo", "demo_command", "Plan, render, launch the simulator, validate, "
                  "sweep, compare EAGLE3 on/off, report."),
    "doctor": Entry("doctor", "doctor_command", "Check GPUs (NVML), docker, /dev/shm, the "
                    "model files and known engine issues."),
    "down": Entry("manage", "down_command", "Stop exactly the engine `servekit up PROFILE` "
                  "started (process group or container)."),
    "image": Entry("image", "image_group", "Engine images: build a profile's patched vLLM image."),
    "logs": Entry("logs", "logs_group", "Show a launched engine's log (logs PROFILE "
                  "[--follow]) or analyze a log file."),
    "plan": Entry("plan", "plan_command", "Plan per-GPU memory: weights, activations, CUDA "
                  "graphs, KV cache and capacity."),
    "profiles": Entry("profiles", "profiles_group", "List, show and create deployment "
                      "profiles (built-in and user YAML files)."),
    "render": Entry("render", "render_command", "Render exact launch artifacts: vllm serve "
                    "args, docker run, compose, k8s or a script."),
    "report": Entry("report", "report_command", "Write report.html (self-contained), "
                    "report.md and PNG plots for one or more runs (and a "
                    "servekit tune run with --tune)."),
    "sim": Entry("sim", "sim_group", "The built-in vLLM engine simulator."),
    "status": Entry("manage", "status_command", "Report whether PROFILE's engine runs, its "
                    "/health, the served model and uptime."),
    "tune": Entry("tune", "tune_command", "Find the settings that serve the most requests "
                  "per GPU within an SLO: search in simulation, verify on the engine."),
    "up": Entry("up", "up_command", "Start the engine for PROFILE and follow its startup "
                "(weights, profiling, KV cache, CUDA graphs, ready), then print the KV "
                "capacity it reports."),
    "validate": Entry("validate", "validate_command", "Check an endpoint is fit to serve: "
                      "health, chat, reasoning, tools, long context, ladder."),
}  # fmt: skip


class ServekitGroup(click.Group):
    """Imports a command's module only when that command runs; handles ServekitError once."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        entry = COMMANDS.get(cmd_name)
        if entry is None:
            return None
        command = getattr(importlib.import_module(f"servekit.cli.{entry.module}"), entry.attr)
        assert isinstance(command, click.Command)
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        limit = formatter.width - 6 - max(len(name) for name in COMMANDS)
        rows = [
            (name, click.Command(name, help=entry.summary).get_short_help_str(limit))
            for name, entry in sorted(COMMANDS.items())
        ]
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except click.UsageError as exc:
            # click's own usage errors (a bad option value, a missing argument) in the same
            # one line as ours, with the command's help as the fix.
            where = exc.ctx.command_path if exc.ctx is not None else ctx.command_path
            message = exc.format_message().rstrip(".")
            click.echo(f"servekit: error: {message}; see '{where} --help'", err=True)
            raise click.exceptions.Exit(exc.exit_code) from None
        except ServekitError as exc:
            if not (isinstance(exc, ChecksFailed) and exc.reported):
                click.echo(f"servekit: error: {exc}", err=True)
            raise click.exceptions.Exit(exc.exit_code) from None


def _print_version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if value and not ctx.resilient_parsing:
        from servekit import __version__  # read on use: the metadata lookup is not free

        click.echo(f"servekit, version {__version__}")
        ctx.exit()


@click.group(cls=ServekitGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--version", is_flag=True, expose_value=False, is_eager=True,
              callback=_print_version, help="Show the version and exit.")  # fmt: skip
def cli() -> None:
    """Plan, launch, validate and load-test LLMs served by vLLM."""


def command_paths(group: click.Group = cli, prefix: tuple[str, ...] = ()) -> list[list[str]]:
    """Every command's words (`["sim", "run"]`), walking the groups (importing every
    command module: for tests and benchmarks, not for start-up)."""
    ctx = click.Context(group)
    paths: list[list[str]] = []
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        if isinstance(command, click.Group):
            paths += command_paths(command, (*prefix, name))
        elif command is not None:
            paths.append([*prefix, name])
    return paths


def main() -> None:
    """Console-script entry point."""
    cli(prog_name="servekit")
