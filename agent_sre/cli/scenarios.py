"""`agent-sre scenarios`: the fault catalog - list it, inject a scenario, clear it again.

`inject` and `clear` go through the official Kubernetes client, so they work against the simulator (its
kubeconfig is written to DATA_DIR/kubeconfig) and against a real cluster running the demo app and Chaos Mesh.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.console import Console
from rich.table import Table

from agent_sre.cli.output import Format, OutputOption, emit, fit, make_console

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

    from agent_sre.cli.views import FaultTypeView
    from agent_sre.models.scenario import Scenario

app = typer.Typer(no_args_is_help=True)


def _console() -> Console:
    """A console sized to the terminal at the time of the command (COLUMNS is honoured), unwrapped in a pipe."""
    return make_console()

KUBECONFIG_HELP = ("kubeconfig of the cluster, or a list of them as KUBECONFIG takes [default: KUBECONFIG, else "
                   "in-cluster config if AGENT_SRE_KUBE_IN_CLUSTER, else the simulator's DATA_DIR/kubeconfig]")
CONTEXT_HELP = "the kubeconfig's context to use [default: AGENT_SRE_KUBE_CONTEXT, else its current-context]"
NAME_HELP = "which scenario of the file (needed when it holds several)"


@app.callback()
def scenarios() -> None:
    """The fault catalog: scenario files, fault injection and clearing."""


def _fail(message: str) -> typer.Exit:
    _console().print(f"[red]error:[/] {message}", soft_wrap=True)
    return typer.Exit(1)


def _load(path: Path | None) -> list[Scenario]:
    from agent_sre.scenarios import ScenarioError, load_scenarios

    try:
        return load_scenarios(path)
    except ScenarioError as exc:
        raise _fail(str(exc)) from None


def _pick(path: Path, name: str | None) -> Scenario:
    from agent_sre.scenarios import ScenarioError, pick_scenario

    try:
        return pick_scenario(path, name)
    except ScenarioError as exc:
        raise _fail(str(exc)) from None


def _client(kubeconfig: Path | None, context: str | None) -> ApiClient:
    from agent_sre.config import get_settings
    from agent_sre.tools.client import KubeconfigError, api_client

    settings = get_settings()
    simulator = not (kubeconfig or settings.kubeconfig or settings.kube_in_cluster)
    try:
        return api_client(settings.sim_kubeconfig if simulator else kubeconfig, context)
    except KubeconfigError as exc:
        raise _fail(str(exc)) from None


def _run(action: str, file: Path, name: str | None, kubeconfig: Path | None, context: str | None) -> None:
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    from agent_sre import faults

    scenario = _pick(file, name)
    client = _client(kubeconfig, context)
    try:
        getattr(faults, action)(client, scenario)
    except ApiException as exc:
        raise _fail(f"the cluster refused: {exc.status} {exc.reason}: {(exc.body or '')[:300]}") from None
    except (HTTPError, OSError) as exc:
        raise _fail(f"cannot reach the cluster: {exc}") from None
    except ValueError as exc:
        raise _fail(str(exc)) from None
    verb = "injected" if action == "inject" else "cleared"
    console = _console()
    console.print(f"{verb} [bold]{scenario.name}[/]: {scenario.fault} on {scenario.namespace}/{scenario.target}",
                  soft_wrap=True)
    if action == "inject":
        labels = scenario.alert.labels
        console.print(f"alert: {labels.get('alertname')} ({labels.get('severity')}) on {labels.get('service')}",
                      soft_wrap=True)
        console.print(f"symptom: {scenario.symptom}", soft_wrap=True)


@app.command("list")
def list_(directory: Path = typer.Option(None, "--dir", help="scenario file or directory [default: the catalog]"),
          fault: str = typer.Option(None, help="only scenarios of this fault type"),
          output: OutputOption = Format.table) -> None:
    """Print the scenarios (families expanded) as a table."""
    loaded = [s for s in _load(directory) if fault is None or s.fault == fault]
    emit(output, loaded, lambda: _print_scenarios(loaded))


def _print_scenarios(loaded: list[Scenario]) -> None:
    from agent_sre.faults import FAULTS

    covered = {f.fault for s in loaded for f in s.faults}  # a scenario may hold several
    table = Table(title=f"{len(loaded)} scenarios, {len(covered)} of {len(FAULTS)} fault types")
    for column in ("NAME", "APP", "FAULT", "TARGET", "ALERT", "ROOT CAUSE", "FIX"):
        table.add_column(column, overflow="fold", no_wrap=column in WHOLE,
                         min_width=NAME_WIDTH if column == "NAME" else None)
    for s in loaded:
        fix = ", ".join(call.tool for call in s.ground_truth.fix) or "(none: change nothing)"
        table.add_row(s.name, s.app, s.fault, s.target, s.alert.labels.get("alertname", ""),
                      s.ground_truth.root_cause, fix)
    fit(_console(), table, optional=("FIX", "ROOT CAUSE", "ALERT", "TARGET"))


IDENTIFIERS = frozenset({"FAULT", "CLASS"})  # whole on one line, to be copied into other commands
WHOLE = IDENTIFIERS | {"APP", "TARGET", "ALERT"}
NAME_WIDTH = 38  # all but the longest few names whole (those fold: the longest is 63 characters)


@app.command()
def faults(output: OutputOption = Format.table) -> None:
    """Print the fault types, what each does and the benchmark fault it is modelled on."""
    from agent_sre.cli.views import FaultTypeView
    from agent_sre.faults import FAULTS

    views = [FaultTypeView(name=f.name, fault_class=f.fault_class, summary=f.summary, modelled_on=f.modelled_on)
             for f in FAULTS.values()]
    emit(output, views, lambda: _print_faults(views))


def _print_faults(views: list[FaultTypeView]) -> None:
    table = Table(title=f"{len(views)} fault types")
    for column in ("FAULT", "CLASS", "WHAT IT DOES", "MODELLED ON"):
        table.add_column(column, overflow="fold", no_wrap=column in IDENTIFIERS)
    for v in views:
        table.add_row(v.name, v.fault_class, v.summary, v.modelled_on)
    _console().print(table)


@app.command()
def inject(file: Path = typer.Argument(..., help="scenario YAML file"),
           name: str = typer.Option(None, "--name", help=NAME_HELP),
           kubeconfig: Path = typer.Option(None, "--kubeconfig", help=KUBECONFIG_HELP),
           context: str = typer.Option(None, "--context", help=CONTEXT_HELP)) -> None:
    """Break the cluster as the scenario says (a bad rollout, a Chaos Mesh experiment, a NetworkPolicy...)."""
    _run("inject", file, name, kubeconfig, context)


@app.command()
def clear(file: Path = typer.Argument(..., help="scenario YAML file"),
          name: str = typer.Option(None, "--name", help=NAME_HELP),
          kubeconfig: Path = typer.Option(None, "--kubeconfig", help=KUBECONFIG_HELP),
          context: str = typer.Option(None, "--context", help=CONTEXT_HELP)) -> None:
    """Undo the scenario's injection (safe to repeat, and after the incident was already fixed)."""
    _run("clear", file, name, kubeconfig, context)
