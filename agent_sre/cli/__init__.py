"""`agent-sre`: one command line with a subcommand per area. Each area's commands live in their own module."""

from __future__ import annotations

import sys

import typer

app = typer.Typer(
    name="agent-sre",
    help="A Kubernetes SRE agent that learns from its own incidents, on Temporal durable execution.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode="markdown",  # docstrings are wrapped for the source: rejoin their lines in help
)


def _print_version(asked: bool) -> None:
    """`--version`: the installed package's version, as bug reports and upgrades need it."""
    if asked:
        from importlib.metadata import version

        typer.echo(f"agent-sre {version('agent-sre')}")
        raise typer.Exit()


@app.callback()
def _settings_are_valid(
    _version: bool = typer.Option(False, "--version", callback=_print_version, is_eager=True,
                                  help="print the version and exit"),
) -> None:
    # Every command reads the settings: a bad variable is one clear error here, not a traceback mid-command.
    # Help reads none, and loading them (pydantic-settings, the models) is most of a subcommand's `--help` time.
    if "--help" in sys.argv[1:]:
        return
    from pydantic import ValidationError

    from agent_sre import config

    try:
        config.get_settings()
    except ValidationError as exc:
        typer.echo(config.bad_settings(exc), err=True)
        raise typer.Exit(2) from None


def _register() -> None:
    """Attach every area's sub-app. Imported lazily so `agent-sre --help` stays quick."""
    from agent_sre.cli import (
        alerts,
        codec,
        demo,
        dev,
        drill,
        episodes,
        incident,
        learn,
        models,
        rollout,
        scenarios,
        sim,
        train,
        worker,
    )

    app.add_typer(dev.app, name="dev")
    app.add_typer(sim.app, name="sim")
    app.add_typer(scenarios.app, name="scenarios")
    app.add_typer(incident.app, name="incident")
    app.add_typer(alerts.app, name="alerts")
    app.add_typer(codec.app, name="codec")
    app.add_typer(episodes.app, name="episodes")
    app.add_typer(models.app, name="models")
    app.add_typer(rollout.app, name="rollout")
    app.add_typer(train.app, name="train")
    app.add_typer(learn.app, name="learn")
    app.command("eval")(train.evaluate)
    app.command("worker")(worker.worker)
    app.command("demo")(demo.demo)
    app.command("drill")(drill.drill)


_register()
