"""`agent-sre train`: start a training cycle (collect → train → evaluate → gate) and follow it;
`agent-sre eval`: a version (results stored with it) or a model directory on an evaluation suite, here and now.

    agent-sre train --algorithm sft --base base --steps 30 --wait
    agent-sre train demonstrations --per-family 40 && agent-sre train --recipe expert --wait
    agent-sre train status training-sft-base-20260314-092653
    agent-sre train stop training-sft-base-20260314-092653 --reason "wrong data"
    agent-sre eval --version sft-base-20260314-092653 --limit 10
    agent-sre eval --model ./checkpoints/grpo-12 --suite variants --per-scenario   # or -o json: evaluation.v1

A cycle is a TrainingCycleWorkflow on the training task queue: run `agent-sre worker` (every queue) or
`agent-sre worker -q training` on the machine that trains.
"""

from __future__ import annotations

import asyncio
import contextlib
import getpass
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, get_args

import typer
from rich.table import Table

from agent_sre.cli.common import fail as _fail
from agent_sre.cli.common import get_settings, no_workflow, not_running, run_with_client, unpolled
from agent_sre.cli.episodes import outcome_table, print_outcomes
from agent_sre.cli.models import console, registry_call
from agent_sre.cli.output import Format, OutputOption, dump, emit

if TYPE_CHECKING:  # the commands import what they use when they run: `--help` stays quick
    from pydantic import ValidationError
    from temporalio.api.workflow.v1 import PendingActivityInfo
    from temporalio.client import Client, WorkflowHandle

    from agent_sre.config import Settings
    from agent_sre.models.episode import EpisodeResult
    from agent_sre.models.training import EvalReport, EvaluationConfig, TrainingRequest, TrainingStatus
    from agent_sre.workflows.training import TrainingCycleWorkflow

RULE_BASED = ("runbook", "expert")  # what `eval --policy` plays: the baseline and the teacher

app = typer.Typer(help="Train a model version: collect data, train, evaluate, gate (a Temporal workflow).",
                  invoke_without_command=True, no_args_is_help=False)
FOLLOW_EVERY_S = 2.0
# A busy server (training beside the dev server on a small machine) can let a poll time out: following keeps
# polling through such failures for this long before it gives up. The cycle itself is durable either way.
FOLLOW_PATIENCE_S = 120.0
STILL_EVERY_S = 30.0  # a line at least this often while following, even when nothing changed
RECIPES = ("expert",)  # a recipe names the teacher whose verified demonstrations SFT imitates



def _run(action: Callable[[Client, Settings], Awaitable[None]], not_found: str = "no such training cycle") -> None:
    run_with_client(action, not_found=not_found)


def build_request(algorithm: str, base: str, steps: int | None, compute: str, version: str | None,
                  since: date | None, policies: list[str], scenarios: str | None, suite: str | None,
                  limit: int | None, reason: str, by: str, resolved_only: bool = False) -> TrainingRequest:
    """The training.request.v1 the options describe; the version name defaults to algorithm, base and time."""
    from agent_sre.models.training import TrainingRequest, TrainingStage

    stages = [s for s in algorithm.split("+") if s in get_args(TrainingStage)]  # an unknown one: the request says
    configs: dict[str, dict[str, object]] = {stage: {"max_steps": steps} for stage in stages} if steps else {}
    if "sft" in stages and policies:  # SFT imitates the policies it was pointed at, not only the runbook
        configs.setdefault("sft", {})["expert_policies"] = policies
    name = version or f"{algorithm.replace('+', '-')}-{base}-{datetime.now(UTC):%Y%m%d-%H%M%S}"
    return TrainingRequest.model_validate({
        "algorithm": algorithm, "base": base, "version": name, "compute": compute, "requested_by": by,
        "reason": reason, **configs,
        "data": {"trajectories": {"since": since, "policies": policies, "resolved_only": resolved_only},
                 "simulated": {"scenarios": scenarios}},
        "evaluation": {"suite": suite, "limit": limit}})


def _errors(exc: ValidationError) -> str:
    return "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'request'}: {e['msg']}" for e in exc.errors())


@app.callback()
def start(
    ctx: typer.Context,
    algorithm: str = typer.Option(None, "--algorithm", help="sft | grpo | sft+grpo | offpolicy | offpolicy+grpo"),
    recipe: str = typer.Option(None, "--recipe", help="expert: SFT on the expert's stored demonstrations (store "
                                                      "them first: agent-sre train demonstrations)"),
    base: str = typer.Option(None, "--base", help="the version to train from: a registered model or 'base'"),
    steps: int = typer.Option(None, "--steps", min=1, help="training steps of each stage (default: the configs')"),
    compute: str = typer.Option("cpu", "--compute", help="cpu | gpu1 | multigpu-fsdp | multigpu-deepspeed"),
    version: str = typer.Option(None, "--version", help="the candidate's name (default: algorithm-base-time)"),
    since: datetime = typer.Option(None, "--since", formats=["%Y-%m-%d"], help="SFT, offpolicy: episodes since"),
    policy: list[str] = typer.Option([], "--policy", help="SFT, offpolicy: this policy's episodes (repeatable)"),
    scenarios: str = typer.Option(None, "--scenarios", help="GRPO: scenario file or dir (default: the catalog)"),
    suite: str = typer.Option(None, "--suite", help="evaluation suite (default: the held-out suite)"),
    limit: int = typer.Option(None, "--limit", min=1,
                              help="evaluate on N scenarios of the suite, across its fault types"),
    request_file: Path = typer.Option(None, "--request", help="a training.request.v1 JSON file instead"),
    reason: str = typer.Option("", "--reason"),
    by: str = typer.Option(None, "--by", help="who asks (recorded with the version); default: your login"),
    wait: bool = typer.Option(False, "--wait", help="follow the cycle until it ends"),
) -> None:
    """Start a training cycle; `agent-sre train status ID` follows it."""
    if ctx.invoked_subcommand is not None:
        return
    from pydantic import ValidationError

    from agent_sre.models.training import TrainingRequest

    try:
        if recipe is not None and (recipe not in RECIPES or algorithm or policy or request_file):
            _fail(f"--recipe takes {', '.join(RECIPES)} and replaces --algorithm, --policy and --request")
        if recipe is not None:
            request = build_request("sft", base or "base", steps, compute, version, since.date() if since else None,
                                    [recipe], scenarios, suite, limit, reason or f"the {recipe} recipe",
                                    by or getpass.getuser(), resolved_only=True)
        elif request_file is not None:
            request = TrainingRequest.model_validate_json(request_file.read_text())
        elif algorithm is None or base is None:
            _fail("--algorithm and --base are required (or --request FILE); see `agent-sre train --help`")
        else:
            request = build_request(algorithm, base, steps, compute, version, since.date() if since else None,
                                    policy, scenarios, suite, limit, reason, by or getpass.getuser())
    except ValidationError as exc:
        _fail(f"bad training request: {_errors(exc)}")
    except OSError as exc:
        _fail(f"cannot read {request_file}: {exc}")
    from agent_sre.activities.training import base_parent  # heavy: not for every `agent-sre --help`
    from agent_sre.workflows.training import TrainingCycleWorkflow

    registry_call(lambda r: base_parent(r, request.base))  # an unknown base: an error here, no cycle started
    workflow_id = f"training-{request.version}" if request.version else f"training-{datetime.now(UTC):%Y%m%d-%H%M%S}"

    async def go(client: Client, settings: Settings) -> None:
        handle = await client.start_workflow(
            TrainingCycleWorkflow.run, request, id=workflow_id, task_queue=settings.queue_training,
            static_summary=f"train {request.version}: {request.algorithm} from {request.base} on {request.compute}")
        console.print(f"training cycle {handle.id} started: {request.algorithm} from {request.base} → "
                      f"{request.version} on {request.compute}")
        console.print(f"follow it: agent-sre train status {handle.id} · {settings.temporal_ui_url}/namespaces/"
                      f"{settings.temporal_namespace}/workflows/{handle.id}")
        if wait:
            await follow(client, handle.id)

    _run(go)


async def follow(client: Client, workflow_id: str, final: bool = True,
                 rpc_timeout: timedelta = timedelta(seconds=10)) -> None:
    """Print each change of phase and step until the cycle ends, then (`final`) its whole status; a step that takes
    long (a GRPO step, an evaluation on a CPU) is printed again every STILL_EVERY_S with its time so far, so a
    terminal never sits silent. A poll that times out or finds the server unavailable is retried, for up to
    FOLLOW_PATIENCE_S in a row."""
    from temporalio.client import WorkflowExecutionStatus
    from temporalio.service import RPCError, RPCStatusCode

    from agent_sre.models.training import TrainingStatus
    from agent_sre.workflows.training import TrainingCycleWorkflow

    transient = {RPCStatusCode.CANCELLED, RPCStatusCode.DEADLINE_EXCEEDED, RPCStatusCode.UNAVAILABLE}
    handle = client.get_workflow_handle(workflow_id, result_type=TrainingStatus)
    loop = asyncio.get_running_loop()
    shown, changed_at, printed_at, failing_since = None, loop.time(), loop.time(), None
    while True:
        try:
            description = await handle.describe(rpc_timeout=rpc_timeout)
            if description.status != WorkflowExecutionStatus.RUNNING:
                break
            st = await handle.query(TrainingCycleWorkflow.progress, rpc_timeout=rpc_timeout)
            played = await _evaluation_played(client, description.raw_description.pending_activities)
        except RPCError as exc:
            now = loop.time()
            failing_since = failing_since if failing_since is not None else now
            if exc.status not in transient or now - failing_since > FOLLOW_PATIENCE_S:
                raise
            console.print(f"[dim]Temporal did not answer ({exc.message}); polling again[/]")
            await asyncio.sleep(FOLLOW_EVERY_S)
            continue
        failing_since = None
        line, now = progress_line(st, played), loop.time()
        if line != shown:
            console.print(line)
            shown, changed_at, printed_at = line, now, now
        elif now - printed_at >= STILL_EVERY_S:
            console.print(f"{line} [dim](still at it, {_minutes(now - changed_at)} on this)[/]")
            printed_at = now
        await asyncio.sleep(FOLLOW_EVERY_S)
    if final:
        await show_final(handle)


def progress_line(st: TrainingStatus, played: tuple[int, int] | None = None) -> str:
    """What the cycle is doing: the training step and its figures while it trains, the version being evaluated and
    its scenarios played (`played`, from the evaluation's heartbeat) while it evaluates, else its phase."""
    m = st.metrics
    if st.phase == "evaluating":
        version = st.candidate if not st.evaluation else st.base  # the candidate first, then its parent
        return f"evaluating {version}" + (f" · {played[0]}/{played[1]} scenarios played" if played else "")
    if st.phase != "training" or m is None:
        return st.phase
    figures = " · ".join(f"{k} {v:.4g}" for k, v in (("loss", m.loss), ("reward", m.reward), ("kl", m.kl))
                         if v is not None)
    return f"{st.phase} · {m.stage} step {m.step}/{m.max_steps or '?'}" + (f" · {figures}" if figures else "")


async def _evaluation_played(client: Client, pending: Sequence[PendingActivityInfo]) -> tuple[int, int] | None:
    """(played, of) from the running evaluation's last heartbeat; None before its first or when none runs."""
    for activity in pending:
        if activity.activity_type.name == "evaluate_version" and activity.heartbeat_details.payloads:
            played, of = await client.data_converter.decode(activity.heartbeat_details.payloads, [int, int])
            return played, of
    return None


def _minutes(seconds: float) -> str:
    return f"{int(seconds // 60)}m{int(seconds % 60):02d}s"


async def show_final(handle: WorkflowHandle[TrainingCycleWorkflow, TrainingStatus],
                     output: Format = Format.table) -> None:
    from temporalio.client import WorkflowFailureError

    try:
        st = await handle.result()
        emit(output, st, lambda: print_status(st))
    except WorkflowFailureError as exc:
        cause = exc.cause
        _fail(f"the training cycle failed: {getattr(cause, 'message', None) or cause}")


@app.command("demonstrations")
def store_demonstrations(
    per_family: int = typer.Option(40, "--per-family", min=1, help="training scenarios played per fault family"),
    seed: int = typer.Option(0, "--seed", help="which scenarios are drawn"),
) -> None:
    """Play the expert on training scenarios (none in an evaluation suite) and store the episodes the ground truth
    verifies in the trajectory store, where `agent-sre train --recipe expert` learns from them."""
    from minio.error import S3Error

    from agent_sre.storage import object_store
    from agent_sre.training.demonstrations import demonstrations, sample_per_family, training_scenarios
    from agent_sre.trajectory_store import write_trajectory

    settings = get_settings()
    chosen = sample_per_family(training_scenarios(), per_family, seed)
    with console.status(f"playing the expert on {len(chosen)} training scenarios…") as shown:
        played = demonstrations(chosen, on_done=lambda n: shown.update(f"expert: {n}/{len(chosen)} scenarios"))
    client = object_store(settings)
    try:
        for t in played.trajectories:
            write_trajectory(client, settings.s3_bucket, t)
    except (S3Error, OSError) as exc:
        _fail(f"cannot store the demonstrations in {settings.s3_endpoint}/{settings.s3_bucket}: {exc} "
              "(is `agent-sre dev up` running?)")
    console.print(f"stored {len(played.trajectories)} verified expert demonstrations of {played.played} played "
                  f"({len(played.rejected)} rejected{': ' + ', '.join(played.rejected[:5]) if played.rejected else ''})"
                  f" in s3://{settings.s3_bucket}; train on them: agent-sre train --recipe expert --wait")


@app.command("status")
def status(workflow_id: str = typer.Argument(..., metavar="ID"), output: OutputOption = Format.table) -> None:
    """Where a training cycle stands (running: phase, step, latest figures), or how it ended."""
    from temporalio.client import WorkflowExecutionStatus

    from agent_sre.models.training import TrainingStatus
    from agent_sre.workflows.training import TrainingCycleWorkflow

    async def show(client: Client, settings: Settings) -> None:
        handle = client.get_workflow_handle(workflow_id, result_type=TrainingStatus)
        desc = await handle.describe()
        if desc.status == WorkflowExecutionStatus.RUNNING:
            if (why := await unpolled(client, desc.task_queue)) is not None:
                _fail(f"{workflow_id} is running, but {why}")
            st = await handle.query(TrainingCycleWorkflow.progress)
            emit(output, st, lambda: print_status(st))
        else:
            await show_final(handle, output)

    _run(show, not_found=no_workflow("training cycle", workflow_id))


@app.command("stop")
def stop(workflow_id: str = typer.Argument(..., metavar="ID"),
         reason: str = typer.Option("", "--reason")) -> None:
    """Stop a training cycle: its training job is terminated and the cycle ends as `stopped`."""
    from agent_sre.workflows.training import TrainingCycleWorkflow

    async def send(client: Client, settings: Settings) -> None:
        await client.get_workflow_handle(workflow_id).signal(TrainingCycleWorkflow.stop,
                                                             reason or f"stopped by {getpass.getuser()}")
        console.print(f"stop sent to {workflow_id}; `agent-sre train status {workflow_id}` shows when it has ended")

    _run(send, not_found=not_running("training cycle", workflow_id))


def print_status(st: TrainingStatus) -> None:
    table = Table(show_header=False, title=f"training cycle {st.workflow_id}")
    table.add_row("phase", st.phase + (f": {st.stop_reason}" if st.stop_reason else ""))
    table.add_row("training", f"{st.algorithm} from {st.base} → {st.candidate}")
    if st.data is not None:
        d = st.data
        rejected = ", ".join(f"{k.removeprefix('rejected: ')} {v}" for k, v in sorted(d.counts.items())
                             if k.startswith("rejected: "))
        table.add_row("data", f"{d.episodes} episodes ({d.expert_episodes} expert) from {len(d.items)} object(s)"
                              + (f"; rejected: {rejected}" if rejected else "")
                              + (f"; {len(d.scenarios)} GRPO scenarios" if d.scenarios else ""))
        for r in d.rejected[:5]:
            table.add_row("", f"{r.key} line {r.line}: {'; '.join(r.reasons)}")
        if (rehearsal := d.rehearsal) is not None:
            table.add_row("rehearsal", f"{rehearsal.episodes} expert episodes from {len(rehearsal.items)} object(s); "
                                       + ", ".join(f"{k} {v}" for k, v in sorted(rehearsal.counts.items())
                                                   if k.startswith(("filtered", "rejected: "))))
    if st.metrics is not None:
        table.add_row("progress", progress_line(st))
    if st.trained is not None:
        table.add_row("launched", st.trained.launcher + (f" (resumed from {st.trained.resumed_from})"
                                                          if st.trained.resumed_from else ""))
    if st.gate is not None:
        table.add_row("gate", ("[green]passed[/]" if st.gate.passed else "[red]failed[/]")
                      + f": {st.candidate} is {st.gate.stage}")
        for reason in st.gate.reasons:
            table.add_row("", reason)
    console.print(table)
    for report in st.evaluation:
        print_report(report)


def print_report(report: EvalReport, unstored: str = "not a registered version") -> None:
    note = "stored with the version" if report.stored else f"not stored ({unstored})"
    print_outcomes(console, outcome_table(report.rows, f"{report.version} on {report.suite} · {report.scenarios} "
                                                       "scenarios · " + ("reused stored results" if report.reused
                                                                         else note), "simulated"))


def evaluate(
    version: str = typer.Option(None, "--version", help="a registered version, or 'base'"),
    model: Path = typer.Option(None, "--model", help="instead of --version: a Hugging Face causal LM directory, "
                                                     "evaluated here; nothing is stored"),
    policy: str = typer.Option(None, "--policy", help="instead of --version: a rule-based policy (runbook, the "
                                                      "baseline; expert, the teacher), played here; nothing is "
                                                      "stored"),
    suite: str = typer.Option(None, "--suite", help="heldout, variants, or a scenario file or directory anywhere "
                                                    "(default: the held-out suite)"),
    limit: int = typer.Option(None, "--limit", min=1, help="only N scenarios of the suite, across its fault types"),
    max_turns: int = typer.Option(None, "--max-turns", min=1, show_default=False,
                                  help="model turns per episode [default: a simulated episode's action limit]"),
    store: bool = typer.Option(True, "--store/--no-store", help="store the results with the version"),
    per_scenario: bool = typer.Option(False, "--per-scenario", help="each scenario's outcome too (plays the suite "
                                                                    "again where results are stored)"),
    output: Format = typer.Option(Format.table, "--output", "-o", help=(
        "table, or evaluation.v1 as json or yaml, with each scenario (plays the suite again where results are "
        "stored)")),
) -> None:
    """Evaluate a version, a model directory or a rule-based policy on a scenario suite here (in-process) and print
    the outcome table and the success rate with its 95 % interval."""
    from pydantic import ValidationError

    from agent_sre.activities.training import evaluate_with_episodes
    from agent_sre.models.training import SIMULATED_MAX_ACTIONS, EvalRequest, EvaluationConfig
    from agent_sre.scenarios import ScenarioError
    from agent_sre.training.comparison import compare

    if sum(x is not None for x in (version, model, policy)) != 1:
        _fail("give one of --version V (a registered version, or 'base'), --model DIR (a model directory) or "
              f"--policy NAME (a rule-based policy: {', '.join(RULE_BASED)})")
    if policy is not None and policy not in RULE_BASED:
        _fail(f"unknown policy {policy!r}; rule-based policies: {', '.join(RULE_BASED)}")
    try:
        config = EvaluationConfig(suite=suite, limit=limit, max_turns=max_turns or SIMULATED_MAX_ACTIONS)
        req = EvalRequest(version=version or "model-dir", store=store, evaluation=config)
    except ValidationError as exc:
        _fail(_errors(exc))
    quiet = output is not Format.table  # stdout is the document
    with contextlib.nullcontext() if quiet else console.status(f"evaluating {version or model}…"):
        try:
            if model is not None:
                report, episodes = evaluate_model_dir(model, config)
            elif policy is not None:
                report, episodes = evaluate_rule_based(policy, config)
            else:
                report, episodes = registry_call(lambda r: evaluate_with_episodes(
                    req, r, get_settings(), reuse=not (per_scenario or quiet)))
        except (ValueError, ScenarioError) as exc:
            _fail(str(exc))
    if quiet:
        assert episodes is not None
        dump(output, compare({report.version: {report.suite: episodes}}))
        return
    print_report(report, unstored="a model directory" if model is not None else "a rule-based policy"
                 if policy is not None else "--no-store" if not store else "not a registered version")
    console.print(success_line(report, episodes))
    if per_scenario and episodes is not None:
        console.print(scenario_table(episodes, f"{report.version} on {report.suite}: each scenario"))


def evaluate_model_dir(model: Path, config: EvaluationConfig) -> tuple[EvalReport, list[EpisodeResult]]:
    """A Hugging Face causal LM directory on the suite, greedily, in-process, on this machine's device."""
    from agent_sre.episodes import summarize
    from agent_sre.models.training import EvalReport
    from agent_sre.training.evaluate import run_model
    from agent_sre.training.gate import load_suite

    if not (model / "config.json").is_file():
        raise ValueError(f"{model}: not a Hugging Face model directory (no config.json)")
    suite, scenarios = load_suite(config)
    name = model.resolve().name
    try:
        episodes = run_model(model, scenarios, version=name, max_turns=config.max_turns,
                             extra_turns_per_service=config.extra_turns_per_service,
                             max_new_tokens=config.max_new_tokens, batch=config.batch,
                             device=get_settings().llm_device)
    except OSError as exc:  # weights or tokenizer files missing or unreadable
        raise ValueError(f"{model}: cannot load the model: {exc}") from None
    return EvalReport(version=name, suite=suite, scenarios=len(scenarios), rows=summarize(episodes),
                      stored=False), episodes


def evaluate_rule_based(name: str, config: EvaluationConfig) -> tuple[EvalReport, list[EpisodeResult]]:
    """A rule-based policy on the suite, in-process, each episode on a manual clock with the environment's own step
    budget (as bench/policies.py plays them)."""
    from agent_sre.episodes import summarize
    from agent_sre.models.remediation import PolicyRef
    from agent_sre.models.training import EvalReport
    from agent_sre.policy.expert import ExpertPolicy
    from agent_sre.policy.runbook import RunbookPolicy
    from agent_sre.training.evaluate import run_policy
    from agent_sre.training.gate import load_suite

    suite, scenarios = load_suite(config)
    if name == "runbook":
        episodes = run_policy(RunbookPolicy(), PolicyRef(name="runbook", version=name), scenarios)
    else:
        episodes = run_policy(ExpertPolicy(), PolicyRef(name="expert", version=name), scenarios)
    return EvalReport(version=name, suite=suite, scenarios=len(scenarios), rows=summarize(episodes),
                      stored=False), episodes


def success_line(report: EvalReport, episodes: list[EpisodeResult] | None) -> str:
    """`success 26/46 = 57 % (95 % CI 42–70 %)`, from the episodes, or from the stored `all` row."""
    from agent_sre.training.stats import wilson_interval

    if episodes is not None:
        n, resolved = len(episodes), sum(e.outcome.outcome == "resolved" for e in episodes)
    else:
        n = report.overall.episodes
        resolved = round(report.overall.success_rate * n)
    low, high = wilson_interval(resolved, n)
    rate = resolved / n if n else 0.0
    return f"success {resolved}/{n} = {100 * rate:.0f} % (95 % CI {100 * low:.0f}–{100 * high:.0f} %)"


def scenario_table(episodes: list[EpisodeResult], title: str) -> Table:
    """One row per episode: what a model did on each scenario, to read beside the per-fault table."""
    tokens = any(e.generated_tokens is not None for e in episodes)
    table = Table(title=title)
    for col in ("scenario", "fault", "outcome", "ending", "steps", "writes", "invalid", "false pos.", "reward",
                *(("tokens",) if tokens else ())):
        table.add_column(col, justify="left" if col in ("scenario", "fault", "outcome", "ending") else "right",
                         no_wrap=True)
    for e in episodes:
        o = e.outcome
        colour = {"resolved": "green", "worse": "red"}.get(o.outcome, "yellow")
        table.add_row(e.scenario, e.fault, f"[{colour}]{o.outcome}[/]", o.termination, str(o.steps), str(o.writes),
                      str(o.invalid), "yes" if o.false_positive else "", f"{o.reward.total:g}",
                      *((str(e.generated_tokens if e.generated_tokens is not None else "–"),) if tokens else ()))
    return table
