"""`agent-sre drill`: the production drill. Simulated incidents served by the production model, a shift of the mix to
a family it handles badly, and the learning schedule's cycles (train, gate, roll out) reacting to it, measured
window by window. Budget options bound the compute: cycles, incidents per window, training steps, evaluation size.

    agent-sre drill --model base --cycles 3 --every 20m --incidents-per-cycle 30 --steps 20
    agent-sre drill --model my-version --algorithm grpo --shifted dependency-down-cache --mix bad-image,oom
    agent-sre drill --model my-version --algorithm offpolicy --shifted init-fail --escalate runbook

The report (one row per cycle) is printed and saved under <data dir>/drill/<name>/; `bench/drill.py` runs the same
command and writes the table into docs/benchmarks.md. See docs/continuous-learning.md.
"""

from __future__ import annotations

import asyncio
from contextlib import AsyncExitStack
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.table import Table

from agent_sre.cli import dev
from agent_sre.cli.common import fail
from agent_sre.cli.learn import build_config, duration_option
from agent_sre.cli.models import console
from agent_sre.cli.output import fit

if TYPE_CHECKING:
    from agent_sre.models.learning import DrillCycle, DrillReport


def drill(
    model: str = typer.Option("base", "--model", help="production: a registered version, a model directory, or "
                                                      "base (SmolLM2-135M, converted)"),
    cycles: int = typer.Option(3, "--cycles", min=1, help="learning cycles that train"),
    every: str = typer.Option("10m", "--every", help="the learning schedule's interval"),
    incidents_per_cycle: int = typer.Option(20, "--incidents-per-cycle", min=1,
                                            help="incidents per window between cycles (more while a rollout runs)"),
    concurrency: int = typer.Option(2, "--concurrency", min=1),
    max_steps: int = typer.Option(15, "--max-steps", min=1, help="actions per incident, in production and in the "
                                                                 "evaluations"),
    mix: str = typer.Option("bad-image,scaled-to-zero,oom,false-alarm", "--mix",
                            help="scenario families served before the shift (comma-separated)"),
    shifted: str = typer.Option("bad-env-value", "--shifted", help="the family the mix shifts to"),
    shift_after: int = typer.Option(None, "--shift-after", min=0, help="incidents before the shift "
                                                                       "(default: one window)"),
    shift_share: float = typer.Option(0.5, "--shift-share", min=0.01, max=1.0),
    algorithm: str = typer.Option(None, "--algorithm", help="the cycles' training (default: the learning config's)"),
    steps: int = typer.Option(None, "--steps", min=1, help="training steps of each stage"),
    compute: str = typer.Option(None, "--compute", help="cpu | gpu1 | multigpu-fsdp | multigpu-deepspeed"),
    min_episodes: int = typer.Option(10, "--min-episodes", min=1, help="a cycle with fewer usable episodes skips"),
    eval_limit: int = typer.Option(10, "--eval-limit", min=1, help="held-out and replayed scenarios per evaluation"),
    plan: str = typer.Option("drill", "--plan", help="rollout plan: drill (compressed to --every), default, "
                                                     "fast-canary, a YAML file, or none"),
    config_file: Path = typer.Option(None, "--config", help="a learning config (YAML or JSON) to start from"),
    escalate: str = typer.Option("none", "--escalate", help="runbook: an on-call (the runbook policy) takes over "
                                                          "each incident production leaves unhealthy, and the cycles "
                                                          "learn from its episode too; none: nobody does"),
    time_limit: str = typer.Option("3h", "--time-limit", help="end the drill after this long, whatever happened"),
    name: str = typer.Option(None, "--name",
                             help="the drill's learning stream (default: drill-YYYYmmdd-HHMMSS, the start time)"),
    stack: bool = typer.Option(True, "--stack/--no-stack", help="bring the dev stack up first"),
    workers: bool = typer.Option(True, "--workers/--no-workers", help="run every queue's worker in this process"),
) -> Any:  # the DrillReport (bench/drill.py reads it); typer evaluates this annotation when the CLI starts
    """Run the production drill and print (and save) its per-cycle report."""
    from agent_sre.activities.training import can_rehearse
    from agent_sre.config import get_settings
    from agent_sre.learning.drill import drill_plan, families, markdown, production_model, run_drill
    from agent_sre.models.learning import DrillPlan, LearningConfig
    from agent_sre.registry import Registry, RegistryError
    from agent_sre.scenarios import default_catalog, load_scenarios
    from agent_sre.storage import object_store
    from agent_sre.temporal import connect
    from agent_sre.workers.main import build_workers

    settings = get_settings()
    interval = duration_option(every, "--every")
    name = name or f"drill-{datetime.now(UTC):%Y%m%d-%H%M%S}"
    if stack:
        dev.up(only=None)
    catalog = load_scenarios(default_catalog())
    try:
        usual, variant = families(catalog, mix.split(",")), families(catalog, [shifted])
    except ValueError as exc:
        fail(str(exc))
    if escalate not in ("none", "runbook"):
        fail(f"--escalate {escalate}: none or runbook")
    if shifted in mix.split(","):
        fail(f"--shifted {shifted} is already in --mix: the shift must bring something new")
    learning = build_config(config_file, name, algorithm, None, steps, compute, min_episodes,
                            "none" if plan == "drill" else plan, settings)
    # the gate judges a candidate with the step budget production serves with, not a tighter one
    evaluation = {**learning.training.evaluation.model_dump(mode="json"), "limit": eval_limit, "max_turns": max_steps}
    learning = LearningConfig.model_validate({
        **learning.model_dump(mode="json"), "start_at": datetime.now(UTC).isoformat(), "replay_eval_limit": eval_limit,
        "training": {**learning.training.model_dump(mode="json", exclude_none=True), "evaluation": evaluation},
        **({"rollout_plan": drill_plan(interval, incidents_per_cycle).model_dump(mode="json")} if plan == "drill"
           else {})})
    registry = Registry.from_settings(settings)
    rehearses = learning.training.data.rehearsal is not None
    if rehearses and not can_rehearse(object_store(settings), settings.s3_bucket, learning.training):
        fail("the learning config rehearses stored episodes (training.data.rehearsal), but the store holds none it "
             "selects, so every cycle would refuse to train; store some first, e.g. a stage-1 batch of the runbook: "
             "`agent-sre episodes run --n 151 --policy runbook` with `agent-sre worker` running")
    try:
        served = production_model(registry, model, settings.models_dir)
    except (ValueError, RegistryError) as exc:
        fail(str(exc))
    drill_spec = DrillPlan(model=served, cycles=cycles, every=interval, incidents_per_cycle=incidents_per_cycle,
                           concurrency=concurrency, max_steps=max_steps, mix=mix.split(","), shifted=shifted,
                           shift_after=incidents_per_cycle if shift_after is None else shift_after,
                           shift_share=shift_share, time_limit=duration_option(time_limit, "--time-limit"),
                           escalate="runbook" if escalate == "runbook" else None, learning=learning)
    console.print(f"[bold]drill {name}[/]: production {served}; {', '.join(drill_spec.mix)} shifting to "
                  f"{shift_share:.0%} {shifted} after {drill_spec.shift_after} incidents; a learning cycle "
                  f"({learning.training.algorithm}) every {every}, {cycles} that train; "
                  f"{incidents_per_cycle} incidents per window, {concurrency} at a time"
                  + (f"; the {drill_spec.escalate} policy takes over what production leaves unhealthy"
                     if drill_spec.escalate else ""))

    async def go() -> DrillReport:
        client = await connect(settings)
        async with AsyncExitStack() as running:
            for worker in build_workers(client, settings) if workers else []:
                await running.enter_async_context(worker)
            try:
                return await run_drill(client, settings, registry, drill_spec, usual, variant, on_cycle=show_cycle,
                                       on_progress=show_progress)
            except RegistryError as exc:
                fail(str(exc))

    report = asyncio.run(go())
    out = settings.data_dir / "drill" / name
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.json").write_text(report.model_dump_json(indent=1))
    (out / "report.md").write_text(markdown(report))
    fit(console, report_table(report))
    for note in report.notes:
        console.print(f"[yellow]note:[/] {note}")
    console.print(f"report: {out / 'report.json'} · {out / 'report.md'}")
    return report


def show_progress(line: str) -> None:
    console.print(f"  {datetime.now(UTC):%H:%M:%S} [dim]{line}[/]")


def show_cycle(cycle: DrillCycle) -> None:
    r = cycle.record
    console.print(f"  {r.cutoff:%H:%M:%S} cycle [bold]{r.status}[/]: {r.reason}  [dim]({cycle.before.incidents} "
                  f"incidents before it, {cycle.before.shifted} shifted)[/]")


def report_table(report: DrillReport) -> Table:
    from agent_sre.learning.drill import COLUMNS, rows

    table = Table(title=f"drill {report.plan.learning.name}")  # a column per cycle: eleven figures fit no terminal row
    table.add_column("", style="bold", no_wrap=True)
    cycles = rows(report)
    for row in cycles:
        table.add_column(row[0] if row[0] == "after" else f"cycle {row[0]}")
    for n, label in enumerate(COLUMNS[1:], start=1):
        table.add_row(label, *(row[n] for row in cycles))
    return table
