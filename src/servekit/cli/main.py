"""The `servekit` command group (shell): registers one thin module per command."""

from __future__ import annotations

import click

from servekit import __version__
from servekit.cli.bench import bench_command
from servekit.cli.compare import compare_command
from servekit.cli.demo import demo_command
from servekit.cli.doctor import doctor_command
from servekit.cli.image import image_group
from servekit.cli.logs import logs_group
from servekit.cli.manage import down_command, status_command
from servekit.cli.plan import plan_command
from servekit.cli.profiles import profiles_group
from servekit.cli.render import render_command
from servekit.cli.report import report_command
from servekit.cli.sim import sim_group
from servekit.cli.up import up_command
from servekit.cli.validate import validate_command


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="servekit")
def cli() -> None:
    """Plan, launch, validate and load-test LLMs served by vLLM."""


cli.add_command(profiles_group)
cli.add_command(plan_command)
cli.add_command(render_command)
cli.add_command(image_group)
cli.add_command(doctor_command)
cli.add_command(up_command)
cli.add_command(status_command)
cli.add_command(down_command)
cli.add_command(logs_group)
cli.add_command(sim_group)
cli.add_command(bench_command)
cli.add_command(validate_command)
cli.add_command(compare_command)
cli.add_command(report_command)
cli.add_command(demo_command)


def main() -> None:
    """Console-script entry point."""
    cli(prog_name="servekit")
