"""The training cycle's activities, on the `training` task queue (the machines with the accelerators):

- `collect_training_data`: select and validate the episodes (schema, duplicates, incomplete) → DataManifest.
- `train_policy`: run the training job as a child process (`training.launch`), heartbeat its progress with the
  latest checkpoint, and register the trained model as a `candidate` version with its lineage.
- `evaluate_version`: a version on the evaluation suite; results are stored with the version.
- `register_if_better`: the gate; a candidate worse than its parent beyond the tolerances is archived.
- `archive_version`: a registered candidate that a stopped or failed cycle never judged is archived.

Refusals that retrying cannot fix (bad request, no usable data, unknown base version) are non-retryable errors
with the reason. A retried `train_policy` resumes: finished stages and the latest checkpoint are in the object
store (`training/<version>/...`), named by the previous attempt's heartbeat details.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import logging
import shutil
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, get_args

from minio import Minio
from temporalio import activity
from temporalio.exceptions import ApplicationError

from agent_sre import cas
from agent_sre.config import Settings
from agent_sre.episodes import summarize
from agent_sre.models.episode import EpisodeResult
from agent_sre.models.registry import DataItem
from agent_sre.models.training import (
    ArchiveRequest,
    DataManifest,
    EvalReport,
    EvalRequest,
    GateDecision,
    GateRequest,
    StoredDir,
    StoredStage,
    TrainedModel,
    TrainHeartbeat,
    TrainingMetrics,
    TrainingProgress,
    TrainingRequest,
    TrainingStage,
    TrainJob,
    TrajectoryFilter,
)
from agent_sre.registry import NoWeightsError, Registry, RegistryError, UnknownVersionError
from agent_sre.registry import weights as stored_files
from agent_sre.scenarios import ScenarioError, default_catalog, load_scenarios
from agent_sre.training.data import Selection, object_key, select_episodes
from agent_sre.training.gate import judge, load_suite
from agent_sre.training.launch import LaunchError, TrainingProcess, launch_command
from agent_sre.training.run import BAD_INPUT
from agent_sre.trajectory_store import objects_of_versions

log = logging.getLogger(__name__)

STORE_PREFIX = "training"
POLL_S = 1.0
PROGRESS_SIGNAL_EVERY_S = 30.0  # besides checkpoints and stage ends: a long run must not flood the history


def refuse(exc: Exception) -> ApplicationError:
    return ApplicationError(str(exc), type=type(exc).__name__, non_retryable=True)


# --- data ----------------------------------------------------------------------------------------------------------
def _objects(client: Minio, bucket: str, keys: Iterator[str],
             progress: Callable[[int], None] = activity.heartbeat) -> Iterator[tuple[str, bytes]]:
    for n, key in enumerate(keys, start=1):
        found = cas.read(client, bucket, key)
        if found is not None:  # deleted since it was listed
            yield key, found[0]
        progress(n)


def grpo_scenarios(request: TrainingRequest) -> list[str]:
    """GRPO's scenario names; refused when any of them is in the evaluation suite (held-out means never trained)."""
    source = request.data.simulated.scenarios or default_catalog()
    scenarios = load_scenarios(Path(source))
    if not scenarios:
        raise ValueError(f"no GRPO scenarios in {source}")
    _, suite = load_suite(request.evaluation)
    overlap = sorted({s.name for s in scenarios} & {s.name for s in suite})
    if overlap:
        raise ValueError(f"{len(overlap)} GRPO scenario(s) from {source} are in the evaluation suite: "
                         f"{', '.join(overlap[:5])}; train and evaluate on different scenarios")
    return [s.name for s in scenarios]


def _listed(client: Minio, bucket: str, wanted: TrajectoryFilter,
            progress: Callable[[int], None] = activity.heartbeat) -> Iterator[tuple[str, bytes]]:
    """The objects a filter names, or else every stored episode of its date range, model versions and writing
    cutoff."""
    if wanted.objects:
        return _objects(client, bucket, iter(wanted.objects), progress)
    listing = objects_of_versions(client, bucket, wanted.since, wanted.model_versions)
    until = wanted.written_until
    keys = (key for key, o in listing if until is None or (o.last_modified is not None and o.last_modified <= until))
    return _objects(client, bucket, keys, progress)


def can_rehearse(client: Minio, bucket: str, request: TrainingRequest) -> bool:
    """Whether the store holds an episode that `request.data.rehearsal` selects outside the evaluation suite (read
    outside an activity). Without one, the training refuses, and so does every learning cycle made from it: a
    cycle's own episodes are only ever taken away from what it rehearses."""
    if request.data.rehearsal is None or not client.bucket_exists(bucket):  # nothing stored yet
        return False
    first = request.data.rehearsal.model_copy(update={"limit": 1})
    held_out = {s.name for s in load_suite(request.evaluation)[1]}
    return bool(select_episodes(_listed(client, bucket, first, progress=lambda _: None), first, bucket,
                                held_out=held_out).episodes)


def _pinned(client: Minio, bucket: str, items: list[DataItem]) -> Iterator[tuple[str, bytes]]:
    """A manifest's objects, refused when their bytes no longer hash as they did at validation."""
    for item in items:
        key = object_key(item, bucket)
        found = cas.read(client, bucket, key)
        body = found[0] if found else b""
        if found is None or hashlib.sha256(body).hexdigest() != item.sha256:
            raise ValueError(f"{item.uri} changed or disappeared since the data was validated; start a new cycle")
        yield key, body


def select_training_data(request: TrainingRequest, episodes: Iterable[tuple[str, bytes]],
                         rehearsal: Iterable[tuple[str, bytes]], bucket: str) -> tuple[Selection, Selection | None]:
    """The episodes to learn from, and the expert episodes to rehearse (none of those); none of either of a
    scenario the evaluation holds out."""
    held_out = {s.name for s in load_suite(request.evaluation)[1]}
    selected = select_episodes(episodes, request.data.trajectories, bucket, held_out=held_out)
    if request.data.rehearsal is None:
        return selected, None
    return selected, select_episodes(rehearsal, request.data.rehearsal, bucket, exclude=selected, held_out=held_out)


# --- training ------------------------------------------------------------------------------------------------------
def upload_dir(client: Minio, bucket: str, directory: Path, prefix: str) -> StoredDir:
    files = stored_files.manifest(directory)
    stored_files.upload(client, bucket, prefix, directory, files)
    return StoredDir(prefix=prefix, files=files)


def download_dir(client: Minio, bucket: str, stored: StoredDir, target: Path) -> Path:
    """A stored directory, each file checked against its hash."""
    for f in stored.files:
        dest = target / f.path
        client.fget_object(bucket, f"{stored.prefix}/{f.path}", str(dest))
        if (dest.stat().st_size, stored_files.sha256_of(dest)) != (f.bytes, f.sha256):
            raise RegistryError(f"{stored.prefix}/{f.path} does not match the hash recorded when it was uploaded")
    return target


def remove_prefix(client: Minio, bucket: str, prefix: str) -> None:
    for obj in client.list_objects(bucket, prefix=prefix, recursive=True):
        client.remove_object(bucket, obj.object_name)


def base_parent(versions: Registry, base: str) -> str | None:
    """The parent a version trained from `base` records: none for 'base' (the converted SmolLM2, unregistered).
    An unknown or rule-based base is a RegistryError, raised before any data is read or any cycle started."""
    from agent_sre.policy.llm.policy import BASE_VERSION

    if base == BASE_VERSION:
        return None
    if not versions.card(base).files:
        raise NoWeightsError(f"base {base} is a rule-based policy: training starts from 'base' or a model version "
                             "with weights")
    return base


def resolve_base(versions: Registry, settings: Settings, base: str) -> tuple[Path, str | None]:
    """(model directory, parent version)."""
    from agent_sre.policy.llm.policy import local_version_dir

    parent = base_parent(versions, base)
    return (local_version_dir(base, settings.models_dir) if parent is None else versions.local_path(base)), parent


def write_episodes(client: Minio, bucket: str, job: TrainJob, out: Path) -> list[str]:
    """The manifest's episodes (and rehearsed ones), from objects whose bytes still hash as they did at validation,
    as files in `out`; returns the training job's arguments naming them."""
    data = job.data
    selected, rehearsal = select_training_data(
        job.request, _pinned(client, bucket, data.items),
        _pinned(client, bucket, data.rehearsal.items if data.rehearsal else []), bucket)
    files = [("--data", "episodes.jsonl", selected)] + ([("--rehearsal", "rehearsal.jsonl", rehearsal)]
                                                         if rehearsal else [])
    args = []
    for option, name, selection in files:
        (out / name).write_text("".join(t.model_dump_json() + "\n" for t in selection.episodes))
        args += [option, str(out / name)]
    return args


def restore(client: Minio, bucket: str, state: TrainHeartbeat, out: Path) -> Path | None:
    """Put the previous attempt's finished stages where the job finds them; returns its checkpoint to resume."""
    for stage, stored in state.finished.items():
        download_dir(client, bucket, stored.model, out / stage / "model")
        result = stored.sft or stored.grpo or stored.offpolicy
        assert result is not None
        (out / stage / "result.json").write_text(result.model_dump_json())
    if state.checkpoint is None:
        return None
    return download_dir(client, bucket, state.checkpoint, out / "resume" / Path(state.checkpoint.prefix).name)


def stage_ends(metrics: TrainingMetrics) -> bool:
    """Whether a checkpoint is of its stage's last step, which the trainer saves too. Not uploaded: the stage's
    model follows at once, and a checkpoint holds the optimizer's state as well, three times the model (1.5 GB for
    SmolLM2 in fp32, which the object store keeps on disk after its deletion until it compacts)."""
    return metrics.max_steps is not None and metrics.step >= metrics.max_steps


class Follower:
    """Turns the job's progress lines into heartbeat state, uploads, and progress signals to the workflow."""

    def __init__(self, job: TrainJob, state: TrainHeartbeat, client: Minio, bucket: str) -> None:
        self.job, self.state, self.client, self.bucket = job, state, client, bucket
        self.results: dict[TrainingStage, Any] = {}
        self._signalled_at = 0.0
        self._signal_now = False

    @property
    def prefix(self) -> str:
        return f"{STORE_PREFIX}/{self.job.version}"

    async def handle(self, p: TrainingProgress) -> None:
        if p.metrics is not None:
            self._signal_now |= self.state.metrics is None
            self.state.metrics = p.metrics
        if p.event == "checkpoint" and p.path and p.metrics and not stage_ends(p.metrics):
            await self._checkpoint(p.metrics.stage, Path(p.path))
        elif p.event == "stage_done" and p.path:
            stage: TrainingStage = next(s for s in get_args(TrainingStage) if getattr(p, s) is not None)
            self.results[stage] = getattr(p, stage)
            if stage not in self.state.finished:  # kept until registered: a retry need not train it again
                model = await asyncio.to_thread(upload_dir, self.client, self.bucket, Path(p.path),
                                                f"{self.prefix}/{stage}/model")
                self.state.finished[stage] = StoredStage(model=model, **{stage: self.results[stage]})
            if self.state.checkpoint is not None and self.state.checkpoint.prefix.startswith(
                    f"{self.prefix}/{stage}/"):  # not a restored stage's: the checkpoint being resumed from
                await self._drop_checkpoint()
            self.state.metrics = self._next_stage(stage) or self.state.metrics
            self._signal_now = True

    def _next_stage(self, done: TrainingStage) -> TrainingMetrics | None:
        """Step 0 of the stage after `done`: its first step can take minutes on a CPU (a GRPO step plays its
        episodes first), and until it logs, progress would still show the finished stage's last step."""
        stages = self.job.request.stages
        following = stages[stages.index(done) + 1:] if done in stages else []
        if not following:
            return None
        config = getattr(self.job.request, following[0])
        return TrainingMetrics(stage=following[0], step=0, max_steps=config.max_steps if config else None,
                               at=datetime.now(UTC))

    async def _checkpoint(self, stage: TrainingStage, path: Path) -> None:
        if not path.is_dir():
            log.warning("checkpoint %s was rotated away before its upload; the next one will be kept", path)
            return
        try:
            stored = await asyncio.to_thread(upload_dir, self.client, self.bucket, path,
                                             f"{self.prefix}/{stage}/{path.name}")
        except FileNotFoundError:
            log.warning("checkpoint %s was rotated away during its upload; the next one will be kept", path)
            return
        await self._drop_checkpoint()
        self.state.checkpoint = stored
        self._signal_now = True

    async def _drop_checkpoint(self) -> None:
        if self.state.checkpoint is not None:
            old, self.state.checkpoint = self.state.checkpoint, None
            await asyncio.to_thread(remove_prefix, self.client, self.bucket, old.prefix + "/")

    async def report(self) -> None:
        """Heartbeat every poll (the SDK throttles); signal the workflow on news, at most every so often."""
        from agent_sre.workflows.training import TrainingCycleWorkflow  # imported here: it imports this module

        activity.heartbeat(self.state)
        due = time.monotonic() - self._signalled_at >= PROGRESS_SIGNAL_EVERY_S
        if self.job.progress_to is None or self.state.metrics is None or not (self._signal_now or due):
            return
        self._signal_now, self._signalled_at = False, time.monotonic()
        try:
            await activity.client().get_workflow_handle(self.job.progress_to).signal(
                TrainingCycleWorkflow.report_progress, self.state.metrics)
        except Exception as exc:  # progress display only: training goes on without it
            log.warning("could not report progress to %s: %s", self.job.progress_to, exc)


async def follow(process: TrainingProcess, follower: Follower) -> int:
    """Until the job exits; a cancelled activity (or any failure here) stops the job before it returns."""
    try:
        while True:
            status = process.poll()
            for p in process.new_progress():
                await follower.handle(p)
            await follower.report()
            if status is not None:
                return status
            await asyncio.sleep(POLL_S)
    finally:
        running = process.poll() is None
        stopped = await asyncio.to_thread(process.stop)  # also whatever the launcher may have left behind
        if running:
            log.info("training job %d stopped (exit status %s)", process.pid, stopped)


def already_trained(versions: Registry, job: TrainJob) -> TrainedModel | None:
    """A retry after the registration succeeded returns it; a name taken by other training is refused."""
    if job.version not in versions.index().versions:
        return None
    card = versions.card(job.version)
    if card.training_request != job.request.model_dump(mode="json"):
        raise ValueError(f"version {job.version} is already registered by another training; choose another name")
    return TrainedModel(version=job.version, parent=card.parent, launcher="none: registered by an earlier attempt")


def visible_gpus() -> int:
    import torch

    return torch.cuda.device_count()


# --- evaluation and the gate ---------------------------------------------------------------------------------------
def evaluation_episodes(req: EvalRequest, versions: Registry, settings: Settings, registered: bool,
                        on_progress: Callable[[int, int], None]) -> list[EpisodeResult]:
    """The version's episodes on the suite; `on_progress(played, of)` after each episode or forward batch."""
    from agent_sre.activities.policy import rule_based_policies
    from agent_sre.policy.llm.policy import BASE_VERSION, local_version_dir
    from agent_sre.training.evaluate import run_model, run_policy

    _, scenarios = load_suite(req.evaluation)
    if registered:
        card = versions.card(req.version)
        if not card.files:  # a rule-based version (the runbook): its own step limit, no model turns
            done = itertools.count(1)
            return run_policy(rule_based_policies()[card.policy], card.policy_ref, scenarios,
                              on_done=lambda _: on_progress(next(done), len(scenarios)))
        model_dir = versions.local_path(req.version)
    elif req.version == BASE_VERSION:
        model_dir = local_version_dir(req.version, settings.models_dir)
    else:
        raise UnknownVersionError(f"unknown model version {req.version!r}: neither registered nor {BASE_VERSION!r}")
    config, results = req.evaluation, []
    for start in range(0, len(scenarios), config.batch):  # one chunk per forward batch: progress between them
        results += run_model(model_dir, scenarios[start:start + config.batch], version=req.version,
                             max_turns=config.max_turns, max_new_tokens=config.max_new_tokens, batch=config.batch,
                             extra_turns_per_service=config.extra_turns_per_service,
                             device=settings.llm_device)
        on_progress(len(results), len(scenarios))
    return results


def run_evaluation(req: EvalRequest, versions: Registry, settings: Settings,
                   on_progress: Callable[[int, int], None] = lambda played, of: None) -> EvalReport:
    """A version on the suite; results already stored for exactly this suite are reused, new ones stored."""
    return evaluate_with_episodes(req, versions, settings, on_progress)[0]


def evaluate_with_episodes(req: EvalRequest, versions: Registry, settings: Settings,
                           on_progress: Callable[[int, int], None] = lambda played, of: None,
                           reuse: bool = True) -> tuple[EvalReport, list[EpisodeResult] | None]:
    """`run_evaluation`, and the episodes behind its rows: None when stored rows were reused (the registry keeps
    only the rows). `reuse=False` plays the suite again whatever is stored, and stores the new rows."""
    suite, scenarios = load_suite(req.evaluation)
    registered = req.version in versions.index().versions
    store_it = registered and req.store
    if reuse and store_it and (rows := versions.eval_results(req.version).get(suite)) is not None:
        return EvalReport(version=req.version, suite=suite, scenarios=len(scenarios), rows=rows, stored=True,
                          reused=True), None
    episodes = evaluation_episodes(req, versions, settings, registered, on_progress)
    rows = summarize(episodes)
    if store_it:
        versions.record_eval(req.version, suite, rows)
    return EvalReport(version=req.version, suite=suite, scenarios=len(scenarios), rows=rows, stored=store_it), episodes


class TrainingActivities:
    """Built once per worker with its settings (data and model directories, the evaluation's device) and two
    registries on the same store: `registry` with short timeouts for cards, stages and episodes (Temporal's retry
    policies own the retries), `weights` without, for the big uploads and downloads of training."""

    def __init__(self, settings: Settings, registry: Registry, weights: Registry) -> None:
        self._settings, self._registry, self._weights = settings, registry, weights

    @activity.defn
    def collect_training_data(self, request: TrainingRequest) -> DataManifest:
        client, bucket = self._registry.client, self._registry.bucket
        try:
            base_parent(self._registry, request.base)
            manifest = DataManifest()
            if request.needs_episodes:
                wanted = request.data
                selected, rehearsal = select_training_data(
                    request, _listed(client, bucket, wanted.trajectories),
                    _listed(client, bucket, wanted.rehearsal) if wanted.rehearsal else iter(()), bucket)
                manifest = selected.manifest
                if rehearsal is not None:
                    if not rehearsal.episodes:
                        raise ValueError(f"no expert episodes to rehearse: none matches data.rehearsal outside the "
                                         f"training episodes and the evaluation suite "
                                         f"(counts: {rehearsal.manifest.counts})")
                    manifest.rehearsal = rehearsal.manifest
            if request.offpolicy is not None:
                from agent_sre.training.offpolicy import check_learnable

                check_learnable(selected.episodes, request.offpolicy, rehearsal.episodes if rehearsal else [])
            if request.sft is not None:
                from agent_sre.training.sft import is_expert_episode

                manifest.expert_episodes = sum(is_expert_episode(t, request.sft.expert_policies)
                                               for t in selected.episodes)
                if not manifest.expert_episodes:
                    raise ValueError(
                        f"no expert episodes for SFT: {manifest.episodes} accepted, none a finished, resolved "
                        f"episode of {', '.join(request.sft.expert_policies)} without false positive (counts: "
                        f"{manifest.counts})")
            if "grpo" in request.stages:
                manifest.scenarios = grpo_scenarios(request)
        except (ValueError, ScenarioError, RegistryError) as exc:
            raise refuse(exc) from exc
        return manifest

    @activity.defn
    async def train_policy(self, job: TrainJob) -> TrainedModel:
        settings, request = self._settings, job.request
        versions = self._weights  # no short store timeout: weights and checkpoints are big
        client, bucket = versions.client, versions.bucket
        details = activity.info().heartbeat_details
        state = TrainHeartbeat.model_validate(details[0]) if details else TrainHeartbeat()
        resumed_from = state.checkpoint.prefix if state.checkpoint else None
        root = settings.data_dir / "training"
        root.mkdir(parents=True, exist_ok=True)
        out = Path(tempfile.mkdtemp(prefix=f"{job.version}-", dir=root))
        try:
            try:
                if (done := await asyncio.to_thread(already_trained, versions, job)) is not None:
                    return done
                base_dir, parent = await asyncio.to_thread(resolve_base, versions, settings, request.base)
                args = ["--request", str(out / "request.json"), "--base", str(base_dir), "--out", str(out)]
                (out / "request.json").write_text(request.model_dump_json())
                if request.needs_episodes:
                    args += await asyncio.to_thread(write_episodes, client, bucket, job, out)
                if (checkpoint := await asyncio.to_thread(restore, client, bucket, state, out)) is not None:
                    args += ["--resume-from", str(checkpoint)]
                gpus = 0 if request.compute == "cpu" else await asyncio.to_thread(visible_gpus)
                launch = launch_command(request.compute, args, gpus)
            except (ValueError, RegistryError, LaunchError) as exc:
                raise refuse(exc) from exc
            if launch.argv[1:3] != ["launch", "--config_file"]:
                activity.logger.warning("training %s without accelerate: %s", job.version, launch.description)
            process = TrainingProcess(launch, out)
            state.pid = process.pid
            activity.logger.info("training %s (pid %d): %s%s", job.version, process.pid, launch.description,
                                 f", resuming from {resumed_from}" if resumed_from else "")
            follower = Follower(job, state, client, bucket)
            status = await follow(process, follower)
            if status != 0:
                raise ApplicationError(f"the training job exited with status {status}; the end of its log:\n"
                                       f"{process.log_tail()}", type="TrainingJobFailed",
                                       non_retryable=status == BAD_INPUT)
            final = out / request.stages[-1] / "model"
            await asyncio.to_thread(
                versions.register, job.version, policy="llm", by=request.requested_by, weights_dir=final, parent=parent,
                training_request=request.model_dump(mode="json"), data_manifest=job.data.learnt_from,
                reason=f"trained by {request.algorithm} from {request.base}" + (f": {request.reason}" if request.reason
                                                                                 else ""))
            await asyncio.to_thread(remove_prefix, client, bucket, f"{STORE_PREFIX}/{job.version}/")
            return TrainedModel(version=job.version, parent=parent, launcher=launch.description,
                                resumed_from=resumed_from, sft=follower.results.get("sft"),
                                grpo=follower.results.get("grpo"), offpolicy=follower.results.get("offpolicy"),
                                metrics=state.metrics)
        finally:
            shutil.rmtree(out, ignore_errors=True)

    @activity.defn
    def evaluate_version(self, req: EvalRequest) -> EvalReport:
        try:
            # (played, of) as heartbeat details: what `agent-sre train status` shows while a version is evaluated
            return run_evaluation(req, self._registry, self._settings, on_progress=activity.heartbeat)
        except (ValueError, ScenarioError, RegistryError) as exc:
            raise refuse(exc) from exc

    @activity.defn
    def register_if_better(self, req: GateRequest) -> GateDecision:
        candidate, parent = req.candidate, req.parent
        if candidate.suite != parent.suite:
            raise ApplicationError(f"{candidate.version} and {parent.version} were measured on different suites "
                                   f"({candidate.suite}, {parent.suite}): no fair comparison", non_retryable=True)
        passed, reasons = judge(candidate.overall, parent.overall, req.tolerances)
        versions = self._registry
        try:
            if passed:
                stage = versions.get(candidate.version).stage
            else:
                failed = "; ".join(r for r in reasons if not r.endswith(": ok"))
                stage = versions.archive(candidate.version, by=req.by,
                                         reason=f"failed the training gate against {parent.version} on {parent.suite}: "
                                                f"{failed}").stage
        except RegistryError as exc:
            raise refuse(exc) from exc
        return GateDecision(passed=passed, reasons=reasons, stage=stage)

    @activity.defn
    def archive_version(self, req: ArchiveRequest) -> str | None:
        """Returns the version's stage afterwards, or None when this training never registered it."""
        versions = self._registry
        if req.version not in versions.index().versions:
            return None
        current = versions.get(req.version)
        if current.card.training_request != req.training_request:
            return None
        if current.stage != "candidate":
            return current.stage
        return versions.archive(req.version, by=req.by, reason=req.reason).stage
