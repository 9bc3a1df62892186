"""The `servekit` command group (shell): registers one thin module per command."""

from __future__ import annotations

import click

from servekit import __version__
from servekit.cli.bench import bench_command
from servekit.cli.compare import compare_command
from servekit.cli.demo import demo_command
from servekit.cli.plan import plan_command
from servekit.cli.profiles import profiles_group
from servekit.cli.render import render_command
from servekit.cli.report import report_command
from servekit.cli.sim import sim_group
from servekit.cli.validate import validate_command


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="servekit")
def cli() -> None:
    """Plan, launch, validate and load-test LLMs served by vLLM."""


cli.add_command(profiles_group)
cli.add_command(plan_command)
cli.add_command(render_command)
cli.add_command(sim_group)
cli.add_command(bench_command)
cli.add_command(validate_command)
cli.add_command(compare_command)
cli.add_command(report_command)
cli.add_command(demo_command)


def main() -> None:
    """Console-script entry point."""
    cli(prog_name="servekit")
