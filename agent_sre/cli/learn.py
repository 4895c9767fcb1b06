"""`agent-sre learn`: continuous learning from production trajectories, one cycle per interval of a Temporal Schedule.

    agent-sre learn schedule --every 6h                  # create or update the schedule (--paused to hold it)
    agent-sre learn run-once --wait                       # one cycle now (the schedule's trigger)
    agent-sre learn status                                # schedule, watermark, the last cycles
    agent-sre learn show continuous-learning-20261121-060000   # a cycle, by its id or the version it trained
    agent-sre learn pause --note "holiday freeze" · learn unpause
    agent-sre learn backfill --start 2026-11-20T00:00 --end 2026-11-21T00:00
    agent-sre learn delete

Cycles are ContinuousLearningWorkflow runs on the training task queue (`agent-sre worker -q training`); their
rollouts run on the agent queue. See docs/continuous-learning.md.
"""

from __future__ import annotations

import asyncio
import getpass
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, get_args

import typer
from rich.table import Table

from agent_sre.cli.common import fail, run_with_client
from agent_sre.cli.episodes import outcome_table, print_outcomes
from agent_sre.cli.models import console, registry_call
from agent_sre.cli.output import Format, OutputOption, emit

if TYPE_CHECKING:  # the commands import what they use when they run: `--help` stays quick
    from temporalio.client import Client

    from agent_sre.cli.views import LearningStatus
    from agent_sre.config import Settings
    from agent_sre.models.learning import CycleRecord, LearningConfig, LearningState
    from agent_sre.models.registry import DataItem
    from agent_sre.registry import Registry

app = typer.Typer(help="Continuous learning: a Temporal Schedule runs one learning cycle per interval.",
                  no_args_is_help=True)
T = TypeVar("T")
POLL_S = 2.0
SHOWN = 20  # source objects `learn show` lists
NAME_HELP = "the learning stream: its schedule's id"


def _run(action: Callable[[Client, Settings], Awaitable[None]], name: str) -> None:
    run_with_client(action, not_found=f"no learning schedule {name!r}; create it with `agent-sre learn schedule`")


def _store(action: Callable[[Registry], T]) -> T:
    """The stream's documents, through the registry's store client (its errors become one-line messages)."""
    try:
        return registry_call(action)
    except ValueError as exc:
        fail(str(exc))


def duration_option(value: str, option: str) -> timedelta:
    from pydantic import TypeAdapter, ValidationError

    from agent_sre.models.rollout import Duration

    try:
        return TypeAdapter(Duration).validate_python(value)
    except ValidationError:
        fail(f"{option} {value!r} is not a duration (6h, 30m, 1d12h)")


def build_config(config_file: Path | None, name: str, algorithm: str | None, base: str | None, steps: int | None,
                 compute: str | None, min_episodes: int | None, plan: str, settings: Settings) -> LearningConfig:
    """The stream's config: the file (YAML or JSON, a LearningConfig) or the defaults, then the options."""
    import yaml
    from pydantic import ValidationError

    from agent_sre.models.learning import LearningConfig
    from agent_sre.models.training import TrainingStage
    from agent_sre.rollout.plans import PlanError, load_plan
    from agent_sre.validation import explain

    stages_known = get_args(TrainingStage)
    raw: dict[str, Any] = {}
    if config_file is not None:
        try:
            raw = yaml.safe_load(config_file.read_text()) or {}
        except (OSError, yaml.YAMLError) as exc:
            fail(f"cannot read {config_file}: {exc}")
        if not isinstance(raw, dict):
            fail(f"{config_file}: a learning config is a mapping (see docs/continuous-learning.md)")
    training = raw.get("training") or LearningConfig().training.model_dump(mode="json", exclude_none=True)
    if algorithm is not None:
        training = {k: v for k, v in training.items() if k not in stages_known or k in algorithm.split("+")}
        training["algorithm"] = algorithm
    stages = str(training.get("algorithm", "")).split("+")
    if steps is not None:
        for stage in (s for s in stages if s in stages_known):
            training[stage] = {**(training.get(stage) or {}), "max_steps": steps}
    training.update({k: v for k, v in (("base", base), ("compute", compute)) if v is not None})
    try:
        chosen = None if plan == "none" else load_plan(plan)
        return LearningConfig.model_validate({
            "rollout_queue": settings.queue_agent, **raw, "name": name, "training": training,
            **({"min_episodes": min_episodes} if min_episodes is not None else {}),
            "rollout_plan": chosen.model_dump(mode="json") if chosen else None})
    except PlanError as exc:
        fail(str(exc))
    except ValidationError as exc:
        fail(f"bad learning config: {explain(exc, root='config')}")


@app.command("schedule")
def schedule(
    every: str = typer.Option("6h", "--every", help="the interval: 6h, 30m, 1d12h"),
    name: str = typer.Option("continuous-learning", "--name", help=NAME_HELP),
    paused: bool = typer.Option(None, "--paused/--active", help="hold or run the schedule (default: create it "
                                                               "active; an update keeps its pause)"),
    config_file: Path = typer.Option(None, "--config", help="a learning config (YAML or JSON) instead of defaults"),
    algorithm: str = typer.Option(None, "--algorithm", help="sft | grpo | sft+grpo | offpolicy | offpolicy+grpo"),
    base: str = typer.Option(None, "--base", help="train from this version when production is no model"),
    steps: int = typer.Option(None, "--steps", min=1, help="training steps of each stage"),
    compute: str = typer.Option(None, "--compute", help="cpu | gpu1 | multigpu-fsdp | multigpu-deepspeed"),
    min_episodes: int = typer.Option(None, "--min-episodes", min=1, help="fewer new usable episodes: skip"),
    plan: str = typer.Option("default", "--plan", help="rollout plan: default, fast-canary, a YAML file, or none"),
    note: str = typer.Option("", "--note", help="a note on the schedule (shown by `learn status`)"),
) -> None:
    """Create or update the learning schedule: one cycle every interval, none while the previous one runs."""
    from agent_sre.learning.schedule import upsert_schedule
    from agent_sre.models.rollout import format_duration

    interval = duration_option(every, "--every")

    async def go(client: Client, settings: Settings) -> None:
        from agent_sre.activities.training import base_parent  # heavy: not for every `agent-sre --help`

        config = build_config(config_file, name, algorithm, base, steps, compute, min_episodes, plan, settings)
        registry_call(lambda r: base_parent(r, config.training.base))  # a typo would fail every cycle
        done = await upsert_schedule(client, config, interval, settings.queue_training, paused, note)
        console.print(f"learning schedule {name} {done}: one {config.training.algorithm} cycle every "
                      f"{format_duration(interval)} on queue {settings.queue_training}, at least "
                      f"{config.min_episodes} new usable episodes, rollout plan "
                      f"{config.rollout_plan.name if config.rollout_plan else 'none'}")

    _run(go, name)


@app.command("run-once")
def run_once(name: str = typer.Option("continuous-learning", "--name", help=NAME_HELP),
             wait: bool = typer.Option(False, "--wait", help="wait for the cycle and print its record")) -> None:
    """Run one cycle now, through the schedule (its overlap policy applies: not while a cycle runs)."""
    from temporalio.client import WorkflowFailureError

    from agent_sre.learning.schedule import started
    from agent_sre.models.learning import CycleRecord

    async def go(client: Client, settings: Settings) -> None:
        handle = client.get_schedule_handle(name)
        before = (await handle.describe()).info
        seen = {*started(a.action for a in before.recent_actions), *started(before.running_actions)}
        await handle.trigger()
        console.print(f"triggered a cycle of {name}")
        if not wait:
            return
        while True:
            info = (await handle.describe()).info
            new = [i for i in [*started(info.running_actions), *started(a.action for a in info.recent_actions)]
                   if i not in seen]
            if new:
                break
            if info.num_actions_skipped_overlap > before.num_actions_skipped_overlap:
                fail(f"a cycle of {name} is still running: the trigger was skipped (overlap policy SKIP)")
            await asyncio.sleep(POLL_S)
        console.print(f"cycle {new[0]} started; waiting for it")
        try:
            print_record(await client.get_workflow_handle(new[0], result_type=CycleRecord).result())
        except WorkflowFailureError as exc:
            fail(f"the cycle failed: {getattr(exc.cause, 'message', None) or exc.cause}")

    _run(go, name)


@app.command("status")
def status(name: str = typer.Option("continuous-learning", "--name", help=NAME_HELP),
           last: int = typer.Option(8, "--last", min=1, help="how many recent cycles to list"),
           output: OutputOption = Format.table) -> None:
    """The schedule (interval, pause, next and running cycles), the watermark, and the last cycles."""
    from temporalio.service import RPCError, RPCStatusCode

    from agent_sre.cli.views import LearningStatus, ScheduleSummary
    from agent_sre.learning import store as streams
    from agent_sre.learning.schedule import started
    from agent_sre.models.rollout import format_duration

    schedule: ScheduleSummary | None = None

    async def go(client: Client, settings: Settings) -> None:
        nonlocal schedule
        try:
            d = await client.get_schedule_handle(name).describe()
        except RPCError as exc:
            if exc.status != RPCStatusCode.NOT_FOUND:
                raise
            return
        schedule = ScheduleSummary(
            every=[format_duration(i.every) for i in d.schedule.spec.intervals], paused=d.schedule.state.paused,
            note=d.schedule.state.note or None, next_runs=list(d.info.next_action_times[:3]),
            running=started(d.info.running_actions), started=d.info.num_actions,
            skipped_overlapping=d.info.num_actions_skipped_overlap)

    _run(go, name)
    state, records = _store(lambda r: (streams.read_state(r.client, r.bucket, name),
                                       streams.list_records(r.client, r.bucket, name, last)))
    view = LearningStatus(name=name, schedule=schedule, state=state, cycles=records)
    emit(output, view, lambda: print_status(view))


@app.command("show")
def show(ident: str = typer.Argument(..., metavar="CYCLE_OR_VERSION"),
         name: str = typer.Option("continuous-learning", "--name", help=NAME_HELP),
         output: OutputOption = Format.table) -> None:
    """One cycle in full, by its workflow id or by the version it trained: what it learnt from and how it went."""
    from agent_sre.learning import store as streams

    def find(r: Registry) -> CycleRecord | None:
        if ident in r.index().versions:
            objects = ((r.card(ident).training_request or {}).get("data", {}).get("trajectories", {})
                       .get("objects") or [])
            return streams.record_of_dataset(r.client, r.bucket, objects[0]) if objects else None
        return next((c for c in streams.list_records(r.client, r.bucket, name) if c.cycle_id == ident), None)

    record = _store(find)
    if record is None:
        fail(f"{ident} is neither a cycle of {name} nor a version trained by a learning cycle")
    stored = record.data.sources if record.data else None
    emit(output, record, lambda: print_record(
        record, _store(lambda r: streams.read_sources(r.client, r.bucket, stored)) if stored else None))


@app.command("pause")
def pause(name: str = typer.Option("continuous-learning", "--name", help=NAME_HELP),
          note: str = typer.Option(None, "--note", help="why (shown by `learn status`)")) -> None:
    """Hold the schedule: no cycle starts until `learn unpause` (running ones finish)."""
    async def go(client: Client, settings: Settings) -> None:
        await client.get_schedule_handle(name).pause(note=note or f"paused by {getpass.getuser()}")
        console.print(f"learning schedule {name} paused")

    _run(go, name)


@app.command("unpause")
def unpause(name: str = typer.Option("continuous-learning", "--name", help=NAME_HELP),
            note: str = typer.Option(None, "--note")) -> None:
    """Let the schedule run cycles again."""
    async def go(client: Client, settings: Settings) -> None:
        await client.get_schedule_handle(name).unpause(note=note or f"unpaused by {getpass.getuser()}")
        console.print(f"learning schedule {name} active")

    _run(go, name)


@app.command("backfill")
def backfill(start: datetime = typer.Option(..., "--start", help="UTC: 2026-11-20T00:00"),
             end: datetime = typer.Option(..., "--end", help="UTC: 2026-11-21T00:00"),
             name: str = typer.Option("continuous-learning", "--name", help=NAME_HELP)) -> None:
    """Run the cycles the schedule would have run between --start and --end, one after another, each up to its
    own time."""
    from agent_sre.learning.schedule import backfill as backfill_schedule

    def utc(moment: datetime) -> datetime:
        return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment

    async def go(client: Client, settings: Settings) -> None:
        try:
            await backfill_schedule(client, name, utc(start), utc(end))
        except ValueError as exc:
            fail(str(exc))
        console.print(f"backfill of {name} from {utc(start):%F %T} to {utc(end):%F %T} UTC requested; "
                      "`agent-sre learn status` lists the cycles as they run")

    _run(go, name)


@app.command("delete")
def delete(name: str = typer.Option("continuous-learning", "--name", help=NAME_HELP)) -> None:
    """Delete the schedule (running cycles finish; the stream's state and records stay in the store)."""
    async def go(client: Client, settings: Settings) -> None:
        await client.get_schedule_handle(name).delete()
        console.print(f"learning schedule {name} deleted")

    _run(go, name)


# --- printing -------------------------------------------------------------------------------------------------------
def print_status(view: LearningStatus) -> None:
    """`learn status` as tables: the schedule (or that there is none), the watermark, the last cycles."""
    if (d := view.schedule) is None:
        console.print(f"no learning schedule {view.name!r} (`agent-sre learn schedule` creates it)")
    else:
        table = Table(show_header=False, title=f"learning schedule {view.name}")
        table.add_row("every", ", ".join(d.every) + (" · [yellow]paused[/]" if d.paused else " · active")
                      + (f" · {d.note}" if d.note else ""))
        table.add_row("next", ", ".join(f"{t:%F %T}" for t in d.next_runs) or "-")
        table.add_row("running", ", ".join(d.running) or "-")
        table.add_row("cycles", f"{d.started} started, {d.skipped_overlapping} skipped while one ran")
        console.print(table)
    print_state(view.state)
    if view.cycles:
        console.print(records_table(view.cycles, f"the last {len(view.cycles)} cycles of {view.name}"))


def print_state(state: LearningState) -> None:
    """The watermark and what was committed. Only a cycle whose candidate passed its gates commits: after a cycle
    that was rejected or skipped "0 committed" is right, and says why rather than looking like a lost cycle."""
    mark = state.watermark
    committed = (f"{state.committed_cycles} cycles committed" if state.committed_cycles else
                 "no cycle committed yet (a cycle commits only when its candidate passes its gates; a rejected or "
                 "skipped one leaves its episodes to the next)")
    line = (f"watermark {mark.through:%F %T} UTC (cycle {mark.cycle_id}) · " if mark else "no watermark yet · ") + \
        f"{committed} · {sum(map(len, state.learnt.values()))} recent episodes learnt"
    console.print(line + (f" · held by {state.claim.cycle_id}" if state.claim else ""))


def gate_summary(record: CycleRecord) -> str:
    gates = [("held-out", record.training.gate if record.training else None), ("production", record.production_gate)]
    return " · ".join(f"{label} {'pass' if g.passed else 'fail'}" for label, g in gates if g is not None) or "-"


def records_table(records: list[CycleRecord], title: str) -> Table:
    table = Table(title=title)
    for col in ("cutoff", "status", "new (usable)", "quarantined", "version", "gates", "rollout", "why"):
        table.add_column(col, no_wrap=col != "why")
    colour = {"registered": "green", "rejected": "red", "failed": "red", "skipped": "yellow"}
    for r in records:
        d = r.data
        table.add_row(f"{r.cutoff:%F %H:%M}", f"[{colour.get(r.status, '')}]{r.status}[/]",
                      f"{d.episodes} ({d.usable})" if d else "-", str(len(d.quarantined)) if d else "-",
                      r.version or "-", gate_summary(r), r.rollout.workflow_id if r.rollout else "-", r.reason)
    return table


def print_record(r: CycleRecord, sources: list[DataItem] | None = None) -> None:
    """The record; with `sources` (read from the store), the objects the cycle learnt from as well."""
    table = Table(show_header=False, title=f"learning cycle {r.cycle_id}")
    table.add_row("status", f"{r.status}: {r.reason}")
    table.add_row("cutoff", f"{r.cutoff:%F %T} UTC · production {r.production} · trained from {r.base}")
    if (d := r.data) is not None:
        table.add_row("window", f"{d.window_start:%F %T} → {d.window_end:%F %T}" if d.window_start
                      else f"everything → {d.window_end:%F %T}")
        table.add_row("data", f"{d.new_objects} new objects of {d.listed} listed; {d.episodes} episodes accepted, "
                              f"{d.usable} usable, {d.late_feedback} with late feedback; refusals: "
                              + (", ".join(f"{k} {v}" for k, v in sorted(d.counts.items()) if k.startswith("rej"))
                                 or "none"))
        if d.sources:
            table.add_row("sources", f"{d.source_objects} objects, listed in {d.sources.uri} sha256 "
                                     f"{d.sources.sha256[:12]}…")
        for item in (sources or [])[:SHOWN]:
            table.add_row("", f"{item.uri} sha256 {item.sha256[:12]}… ({item.rows} episodes)")
        if sources and len(sources) > SHOWN:
            table.add_row("", f"… and {len(sources) - SHOWN} more objects")
        if d.dataset:
            table.add_row("dataset", f"{d.dataset.uri} sha256 {d.dataset.sha256[:12]}…")
        for q in d.quarantined:
            table.add_row("quarantined", f"{q.key}: {'; '.join(q.reasons)}")
        table.add_row("replay", f"{len(d.replay.train)} scenarios to train, {len(d.replay.evaluate)} to evaluate"
                                + "".join(f"; {k}: {v}" for k, v in d.replay.not_replayable.items()))
    if r.version:
        table.add_row("version", f"{r.version} · gates: {gate_summary(r)}")
    if r.rollout:
        table.add_row("rollout", f"{r.rollout.workflow_id}: {r.rollout.request.candidate} against "
                                 f"{r.rollout.request.baseline}, plan {r.rollout.request.plan.name}")
    if r.watermark:
        table.add_row("committed", f"watermark {r.watermark.through:%F %T} UTC at {r.watermark.committed_at:%F %T}")
    console.print(table)
    for report in [*(r.training.evaluation if r.training else []), *r.production_eval]:
        print_outcomes(console, outcome_table(report.rows, f"{report.version} on {report.suite}", "simulated"))
