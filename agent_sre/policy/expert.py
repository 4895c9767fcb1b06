"""The expert policy: the teacher the student imitates, a triage per fault family that reaches its fix from what it
has read.

The runbook is imitable but wrong or silent on a third of the catalog; a teacher that knows the scenario's ground
truth is right everywhere but not imitable (its choices come from knowledge the conversation does not hold). This
policy sits between them: it decides only from the tool output in the conversation, like the runbook, but it
reads what an SRE would read for each symptom (the crash's last log lines, the scheduler's message, the caller's
errors and the dependency they name, endpoints, ports, selectors, network policies, nodes) and every argument of its
fix appears in that output or follows from it by a rule stated next to it. `tests/test_expert.py` checks this for
every family. Because it decides from the conversation alone, it can label any state a student reaches (DAgger).

Each triage step asks for what it needs with `Reads.read`: a read not made yet is the next action, so the policy
is one pure function of the conversation, re-run at every turn. An incident can hold several faults (issue #40): once
a fix checks out it lists the pods again and mends the next service that still fails (`next_fault`), round after
round, until nothing it can see fails, the users' entry tier included (its logs show a Service that reaches none of
its pods); with no room left for that, it hands over what it still sees failing.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from dataclasses import dataclass, field

import yaml

from agent_sre.models.remediation import PolicyRef
from agent_sre.models.tools import TOOL_SPECS, ToolCall
from agent_sre.models.trajectory import Trajectory
from agent_sre.policy.base import ActionPolicy
from agent_sre.policy.evidence import (
    CHAOS_KIND_CASE,
    CHAOS_ROW,
    MEMORY_LIMIT,
    MIB,
    REPLICAS,
    ROLLED_OUT,
    SCALED_FROM,
    Pod,
    age_seconds,
    deployment_of,
    object_name,
    program_text,
    scaled_from,
)
from agent_sre.policy.evidence import pods as _pods

MAX_ERROR_CHARS = 80  # of a failed fix's error, quoted in the escalation
SCHEDULER = re.compile(r"FailedScheduling\s+(?P<message>.*)")
SECRET_REF = re.compile(r"^\s+(?P<env>[A-Z_][A-Z0-9_]*):\s+<set to the key '(?P<key>[^']+)' in secret "
                        r"'(?P<name>[^']+)'>", re.MULTILINE)
ENV_LINE = re.compile(r"^\s+(?P<env>[A-Z_][A-Z0-9_]*):\s+(?P<value>\S+)\s*$", re.MULTILINE)
DEPENDENCY_VALUE = re.compile(r"^(?:[a-z]+://)?(?P<host>[a-z][-a-z0-9]*)(?:[.:/]|$)")
ERROR_LINE = re.compile(r"level=(?:error|fatal)|\berror:|\bERROR\b|\bFATAL\b|Exception")  # the level, not a word
HARD_FAILURE = re.compile(r"connection refused|i/o timeout|no such host|no endpoints|connect timed out",
                          re.IGNORECASE)  # nothing answered at all: one such line, at any level, outweighs a slow reply
REPEATED = re.compile(r"\(x(?P<n>\d+)(?: similar)?\)\s*$")  # a line the log view folded with its repeats
TIMEOUT = re.compile(r"i/o timeout|timed out|deadline exceeded|connect timeout", re.IGNORECASE)
CONTAINER_PORT = re.compile(r"^\s+Port:\s+(?P<port>\d+)/TCP", re.MULTILINE)
SERVICE_PORT = re.compile(r"^Port:\s+\S+\s+(?P<port>\d+)/", re.MULTILINE)
TARGET_PORT = re.compile(r"^TargetPort:\s+(?P<port>[-a-z0-9]+)/", re.MULTILINE)
ENDPOINT_PORT = re.compile(r"\d+\.\d+\.\d+\.\d+:(?P<port>\d+)")
SELECTOR = re.compile(r"^Selector:\s+(?P<selector>\S+)", re.MULTILINE)
TEMPLATE_LABELS = re.compile(r"^Pod Template:\n\s+Labels:\s+(?P<labels>\S+)", re.MULTILINE)
NODE_SELECTORS = re.compile(r"^Node-Selectors:\s+(?P<selectors>.+)$", re.MULTILINE)
NODE_ROW = re.compile(r"^(?P<name>[-a-z0-9.]+)\s+(?P<status>\S+)\s+\S+\s+(?P<labels>\S+)\s*$", re.MULTILINE)
NETPOL_ROW = re.compile(r"^(?P<name>[-a-z0-9.]+)\s+(?P<selector>\S+)\s+(?P<allows>.+?)\s+(?P<age>\S+)\s*$",
                        re.MULTILINE)
NAMED_PEERS = re.compile(r"\bapp in \(")  # a policy that lets pods in by name: least privilege, kept
QUOTA_EXCEEDED = re.compile(r"exceeded quota: (?P<name>[-a-z0-9]+), requested: pods=(?P<requested>\d+), "
                            r"used: pods=(?P<used>\d+), limited: pods=(?P<limit>\d+)")
CONFIG_MAP_REF = re.compile(r"^\s+(?P<env>[A-Z_][A-Z0-9_]*):\s+<set to the key '(?P<key>[^']+)' of config map "
                            r"'(?P<name>[^']+)'>", re.MULTILINE)
NUMBER_WITH_UNIT = re.compile(r"""["'](?P<digits>\d+)[a-zA-Z]+["']""")  # '72s' where a count is expected
ALLOWED_VALUES = re.compile(r"(?:one of:|choice|is not valid \()\s*(?P<choices>[-a-z0-9_]+(?:, [-a-z0-9_]+)+)")
PASSWORD_REJECTED = re.compile(r"password authentication failed|Access denied for user|authentication failed",
                               re.IGNORECASE)
DB_PASSWORD_ENV = re.compile(r"PASSWORD", re.IGNORECASE)
CURRENT_REVISION = re.compile(r"^(?P<revision>\d+) \(current\)", re.MULTILINE)
TEMPLATE_CHANGED = re.compile(r"^\d+ \(current\)\s+\S+\s+(?P<change>.+?)\s{3,}", re.MULTILINE)
SCALED_UP = re.compile(r"deployment/(?P<name>[-a-z0-9]+)\s+Scaled up replica set (?P<replicaset>\S+)")
SCALED_TO_NOTHING = re.compile(r"deployment/(?P<name>[-a-z0-9]+)\s+Scaled down replica set \S+ "
                               r"(?:to 0 from|from \d+ to 0\b)")
MISSING_SECRET = re.compile(r'secret "(?P<name>[-a-z0-9.]+)" not found|couldn\'t find key \S+ in Secret '
                            r'[-a-z0-9]+/(?P<of>[-a-z0-9.]+)')
MISSING_CLAIM = re.compile(r'persistentvolumeclaim "(?P<name>[-a-z0-9.]+)" not found')
UNBOUND_CLAIMS = "pod has unbound immediate PersistentVolumeClaims"
CLAIM_NAME = re.compile(r"PersistentVolumeClaim \(ClaimName: (?P<name>[-a-z0-9.]+)\)")  # describe's Volumes
RENAMED_CLAIM = re.compile(r"pod volume \S+ claim (?P<was>[-a-z0-9.]+) -> (?P<now>[-a-z0-9.]+)")
BOUND = re.compile(r"^status:\n(?:  .*\n)*?  phase: Bound$", re.MULTILINE)  # get_resource's YAML of a claim
PULL_DENIED = re.compile(r"Failed to pull image .*: 401 Unauthorized")
PULL_SECRETS = re.compile(r"^Image Pull Secrets:\s+(?P<names>\S+)", re.MULTILINE)
PULL_SECRET_CHANGED = re.compile(r"pod imagePullSecrets (?P<was>\S+) -> (?P<now>\S+)")
UNTOLERATED = re.compile(r"had untolerated taint \{(?P<key>[^:{}]+): (?P<value>[^{}]*)\}")
REVISION_ROW = re.compile(r"^(?P<revision>\d+)(?: \(current\))?\s+\S+\s+(?P<change>.+?)(?:\s{3,}|\s*$)",
                          re.MULTILINE)  # a row of `rollout_history`: its revision and what it changed
LIMITED_TO = re.compile(r'"limits":\{[^{}]*"memory":"(?P<value>\d+)(?P<unit>Ki|Mi|Gi)"')  # in a change's JSON
TOP_MEMORY = re.compile(r"^(?P<pod>[-a-z0-9.]+)\s+\d+m\s+(?P<memory>\d+)Mi\s*$", re.MULTILINE)
PARENTHESISED = re.compile(r" \((?:[^()]|\([^()]*\))*\)")
ENTRY_TIER = "tier=web"  # the label of the pods the users' requests enter by (the apps' `tier` labels)
MIN_UPSTREAM_SCORE = 3  # an error line naming a dependency scores 1, or 3 if nothing answered: below it, noise
CPU_REQUEST = re.compile(r"Requests: cpu=(?P<cpu>\d+)m")
CPU_LIMIT = re.compile(r"Limits: cpu=(?P<cpu>\d+)m")
THROTTLED = 0.95  # of its CPU limit: pods using this much are held back by their CFS quota
TOP_ROW = re.compile(r"^(?P<pod>[-a-z0-9.]+)\s+(?P<cpu>\d+)m\s", re.MULTILINE)
OOM_RUN = re.compile(r"Last State: Terminated\n\s+Reason: OOMKilled\n\s+Exit Code: \d+\n"
                     r"\s+Started: (?P<started>\S+) ago\n\s+Finished: (?P<finished>\S+) ago")
LEAK_RUN_S = 75  # a container OOM-killed after serving this long grew into its limit: a leak, not a small limit
REVISION_LINE = re.compile(r"^\d+(?: \(current\))?\s", re.MULTILINE)  # any row of `rollout_history`
SATURATED = 1.5  # pods using this many times their CPU request are overwhelmed, not busy
HPA_TARGET = 0.7  # the utilization the teams' autoscalers aim at
HPA_EVENT = re.compile(r"SuccessfulRescale\s+horizontalpodautoscaler/(?P<name>[-a-z0-9.]+)\s")
HPA_UTILIZATION = re.compile(r"\(as a percentage of request\): (?P<used>\d+)% \(\S+\) / (?P<target>\d+)%")
HPA_PODS = re.compile(r"^Deployment pods: (?P<current>\d+) current / \d+ desired", re.MULTILINE)


class _Need(Exception):
    """A triage step needs a read that has not been made: it is the policy's next action."""

    def __init__(self, call: ToolCall) -> None:
        super().__init__(call.command_line())
        self.call = call


def _key(tool: str, args: dict[str, object]) -> str:
    return tool + json.dumps(args, sort_keys=True)


@dataclass
class _Handover(Exception):
    """What the agent may not mend (a secret only its owner knows): the policy escalates, changing nothing."""

    def __init__(self, diagnosis: str, summary: str) -> None:
        super().__init__(diagnosis)
        self.diagnosis, self.summary = diagnosis, summary


@dataclass
class Reads:
    """The outputs of the reads made so far, by call: what the diagnosis may use."""

    outputs: dict[str, str] = field(default_factory=dict)

    def read(self, tool: str, **args: object) -> str:
        found = self.outputs.get(_key(tool, args))
        if found is None:
            raise _Need(ToolCall(tool=tool, args=args))
        return found


@dataclass(frozen=True)
class Remedy:
    """The fix (one or more writes, in order), the fault in words, and the read that shows whether it worked."""

    calls: tuple[ToolCall, ...]
    diagnosis: str
    check: ToolCall
    fallback: Remedy | None = None  # what to do when the check fails: an undo that landed on a failing revision

    @property
    def targets(self) -> set[str]:
        """The deployments and services the fix and its check name: what this round fixed."""
        return {str(v) for c in (*self.calls, self.check) for k, v in c.args.items() if k in ("deployment", "service")}

    def worked(self, output: str) -> bool:
        if self.check.tool == "rollout_status":
            return ROLLED_OUT.search(output) is not None
        if self.check.tool == "get_endpoints":
            return bool(ENDPOINT_PORT.search(output.split("\nnot ready:")[0]))
        return True  # a listing that confirms the object is gone: the write's own result already said so


def _blame(logs: str, dependencies: set[str]) -> Counter[str]:
    """How loudly the logs blame each dependency: an error line naming it scores 1, a line (of any level) saying
    nothing answered scores 3, times the repeats the log view folded into it."""
    counts: Counter[str] = Counter()
    for line in program_text(logs).splitlines():
        weight = 3 if HARD_FAILURE.search(line) else 1 if ERROR_LINE.search(line) else 0
        repeated = REPEATED.search(line)
        for dep in dependencies if weight else ():
            if re.search(rf"\b{re.escape(dep)}\b", line):
                counts[dep] += weight * (int(repeated["n"]) if repeated else 1)
    return counts


def _dependency_names(deployment: str) -> set[str]:
    """The hosts `describe deployment`'s environment points at: the services it calls."""
    return {m["host"] for m in (DEPENDENCY_VALUE.match(v["value"]) for v in ENV_LINE.finditer(deployment)) if m}


def _idle(top: str, pods: list[Pod], names: set[str]) -> list[str]:
    """The deployments among `names` whose running pods all use no CPU (`top`): nothing reaches them."""
    cpu = {m["pod"]: int(m["cpu"]) for m in TOP_ROW.finditer(top)}
    running = {d: [p.name for p in pods if p.deployment == d and p.status == "Running"] for d in sorted(names)}
    return [d for d, own in running.items() if own and all(cpu.get(p) == 0 for p in own)]


def _scaled_to_nothing(deployment: str) -> bool:
    """`describe deployment` says it wants 0 replicas."""
    replicas = REPLICAS.search(deployment)
    return replicas is not None and replicas["desired"] == "0"


def _last_change(history: str) -> str | None:
    """What the current revision changed in the pod template (`rollout_history`), or None when it changed nothing
    there (a restart, or a change of config the template only points to). A JSON value in it is written as words
    (`web resources requests cpu=4 memory=128Mi; limits memory=256Mi`): its quotes and braces cost a token each, and
    the ending that quotes the change must fit the tokens of one action (MAX_ACTION_TOKENS)."""
    change = TEMPLATE_CHANGED.search(history)
    if change is None or change["change"] == "no template change":
        return None
    head, brace, value = change["change"].partition("{")
    try:
        parsed = json.loads(brace + value) if brace else None
    except json.JSONDecodeError:
        parsed = None
    if not isinstance(parsed, dict):
        return str(change["change"])
    return head + "; ".join(f"{key} " + " ".join(f"{k}={v}" for k, v in inner.items()) if isinstance(inner, dict)
                            else f"{key}={inner}" for key, inner in parsed.items())


def _rolled_out_meanwhile(first: str, now: str, fixed: set[str]) -> list[str]:
    """The deployments, not fixed by the agent, whose events `now` show a replica set scaled up that the first
    round's events did not: someone rolled them out since (a later fault), and their rollout must finish before
    the incident does."""
    return list(dict.fromkeys(m["name"] for m in SCALED_UP.finditer(now)
                              if m["name"] not in fixed and m["replicaset"] not in first))


def _rollback_of(remedy: Remedy) -> ToolCall | None:
    """The remedy's `rollout_undo`, if it is a rollback."""
    return next((call for call in remedy.calls if call.tool == "rollout_undo"), None)


def _rolled_out_since(before: str, now: str) -> bool:
    """Whether `rollout_history` read `now` shows a rollout after the rollback that followed the read `before`: a
    rollback adds exactly one revision (the one before becomes the newest), so a current revision further on is
    another change made since."""
    was, current = CURRENT_REVISION.search(before), CURRENT_REVISION.search(now)
    return was is not None and current is not None and int(current["revision"]) > int(was["revision"]) + 1


def _scheduler_reason(message: str) -> str:
    """The scheduler's verdict, its first sentence (`0/3 nodes are available: 3 Insufficient cpu`): what follows
    it (preemption) says nothing more and would not fit one action."""
    return _clip(message.split(". ")[0].rstrip("."), 80)


def _clip(text: str, limit: int = 60) -> str:
    """`text` in at most `limit` characters, cut after its last whole clause (`; `, `, `) or word that fits, not in
    the middle of a word or a value."""
    if len(text) <= limit:
        return text
    cut = text[:limit + 1]
    at = max(cut.rfind("; "), cut.rfind(", "))
    return text[:at] if at > 0 else cut[:max(cut.rfind(" "), 1)].rstrip(",;:")


def _rollout_check(deployment: str) -> ToolCall:
    return ToolCall(tool="rollout_status", args={"deployment": deployment})


def _finish(diagnosis: str, summary: str) -> ToolCall:
    return ToolCall(tool="finish", args={"diagnosis": diagnosis, "summary": summary})


def _diagnoses(remedies: list[Remedy]) -> str:
    """The faults in words; of several, each without its parenthesised details, so that the ending still fits the
    tokens of one action (MAX_ACTION_TOKENS)."""
    if len(remedies) == 1:
        return remedies[0].diagnosis
    return "; ".join(PARENTHESISED.sub("", r.diagnosis) for r in remedies)


def _finished(done: list[Remedy], then: str) -> ToolCall:
    """The ending after every round's fix checked out; `then`, why it stops there (of several rounds)."""
    if len(done) == 1:  # as an incident of one fault always ended
        r = done[0]
        return _finish(r.diagnosis, f"applied {', '.join(c.tool for c in r.calls)}; {r.check.tool} shows it worked")
    return _finish(_diagnoses(done), f"{len(done)} fixes, each checked; {then}")


class ExpertPolicy(ActionPolicy):
    """Investigate by symptom, fix from what was read, check the fix, then finish; escalate what it cannot fix."""

    def choose(self, ref: PolicyRef, trajectory: Trajectory) -> ToolCall:
        """Round after round: diagnose, fix, check; once a fix checks out, list the pods again and take the next
        deployment still failing, until nothing observable is (`next_fault`). Each round diagnoses from the reads
        made since the last one ended, the first answer to each (a check after the fix does not re-diagnose); its fix
        and its check are their first calls since then (the same fix later, for a later fault, is the next round's)."""
        steps = [(s.action, s.result) for s in trajectory.steps if s.action is not None and s.result is not None]
        room = trajectory.incident.limits.max_steps - len(trajectory.steps)
        service = object_name(trajectory.incident.service)
        first, done, start = Reads(), list[Remedy](), 0
        while True:
            reads = Reads()
            for action, result in steps[start:]:
                if not TOOL_SPECS[action.tool].write:
                    reads.outputs.setdefault(_key(action.tool, action.args), result.output)
            try:
                remedy = self.diagnose(reads, service) if not done else self.next_fault(reads, first, done, service)
            except _Need as need:
                if done and room < 2:  # no room for the read and an ending after it
                    if still := sorted({p.deployment for p in _pods(reads.outputs.get(_key("list_pods", {}), ""))
                                        if p.sick and p.status != "Completed"}):
                        return ToolCall(tool="escalate", args={"diagnosis": _diagnoses(done), "summary": (
                            f"list_pods shows {', '.join(still)} still failing; no step left to mend it")})
                    if rolling := sorted({str(action.args.get("deployment")) for action, result in steps[start:]
                                          if action.tool == "rollout_status" and not ROLLED_OUT.search(result.output)}):
                        return ToolCall(tool="escalate", args={"diagnosis": _diagnoses(done), "summary": (
                            f"the rollout of {', '.join(rolling)} does not finish; no step left to mend it")})
                    return _finished(done, "no step left to look for another failing service")
                return need.call
            except _Handover as handover:
                return ToolCall(tool="escalate", args={"diagnosis": _diagnoses(done) + "; " + handover.diagnosis
                                                       if done else handover.diagnosis, "summary": handover.summary})
            if not done:
                first = reads
            if remedy is None:
                if done:
                    return _finished(done, "list_pods shows nothing else failing")
                return _finish("no fault found: the alerted service's pods are running and ready, and its logs show "
                               "no failing dependency", "false alarm; nothing needs changing")
            # The same fix for the same fault again: the first did not hold. The same fix for another fault (a later
            # rollout of a deployment already rolled back, its history's current change another) is a new round.
            if any(remedy.calls == earlier.calls and remedy.diagnosis == earlier.diagnosis for earlier in done):
                return ToolCall(tool="escalate", args={"diagnosis": _diagnoses(done), "summary": (
                    f"{remedy.check.command_line()} checked out, yet {', '.join(sorted(remedy.targets))} fails again")})
            since, next_round = start, False
            while True:  # the fix, its check, and, where the check fails, its fallback's fix and check
                fixed_at = since - 1
                for call in remedy.calls:
                    applied = [i for i, (action, _) in enumerate(steps) if i >= since and action == call]
                    if not applied:
                        return call
                    result = steps[applied[0]][1]
                    if not result.ok:
                        error = next((line for line in result.output.splitlines() if line.strip()), "no answer")
                        return ToolCall(tool="escalate", args={"diagnosis": _diagnoses([*done, remedy]), "summary":
                                                               f"{call.tool} failed: {error[:MAX_ERROR_CHARS]}"})
                    fixed_at = max(fixed_at, applied[0])
                after = [i for i, (action, _) in enumerate(steps) if i > fixed_at and action == remedy.check]
                if not after:
                    if room < 2:
                        return _finish(_diagnoses([*done, remedy]), "applied the fix; no step left to check it")
                    return remedy.check
                output = steps[after[0]][1].output
                if remedy.worked(output):
                    break
                if (undo := _rollback_of(remedy)) is not None:
                    # Did someone else roll the deployment out on top of the rollback (a fault that arrived later)?
                    # The history, read again, says so: the rollback added one revision, a later rollout another.
                    # (What past steps meant must not depend on the room left now: each choice replays them all.)
                    history = ToolCall(tool="rollout_history", args={"deployment": undo.args["deployment"]})
                    reread = next((i for i, (action, _) in enumerate(steps) if i > after[0] and action == history),
                                  None)
                    if reread is None and room >= 2:
                        return history
                    if reread is not None and _rolled_out_since(reads.outputs.get(_key(history.tool, history.args),
                                                                                  ""), steps[reread][1].output):
                        done.append(remedy)  # the rollback did its part; the later rollout is the next round's fault
                        start, next_round = reread, True
                        break
                if remedy.fallback is None:
                    last = (output.strip().splitlines() or ["no answer"])[-1]
                    return ToolCall(tool="escalate", args={
                        "diagnosis": _diagnoses([*done, remedy]),
                        "summary": f"the fix did not work: {last[:MAX_ERROR_CHARS]}"})
                remedy, since = remedy.fallback, after[0] + 1
            if next_round:
                continue
            done.append(remedy)
            start = after[0] + 1

    # --- triage -------------------------------------------------------------------------------------------------

    def diagnose(self, r: Reads, service: str | None) -> Remedy | None:
        pods = _pods(r.read("list_pods"))
        events = r.read("get_events")
        chaos = r.read("list_chaos_experiments")
        if found := CHAOS_ROW.search(chaos):
            kind = CHAOS_KIND_CASE.get(found["kind"].lower(), found["kind"])
            return Remedy((ToolCall(tool="delete_chaos_experiment", args={"kind": kind, "name": found["name"]}),),
                          f"chaos experiment {kind}/{found['name']} is injecting faults into the namespace",
                          ToolCall(tool="list_chaos_experiments"))
        target = service or next((p.deployment for p in pods if p.sick and p.status != "Completed"), None)
        if target is None:
            return None
        return self._service(r, target, pods, events, caller=None)

    def next_fault(self, r: Reads, first: Reads, done: list[Remedy], service: str | None) -> Remedy | None:
        """After a fix checked out: the pods listed again, and the first deployment that still fails and was not fixed
        yet, diagnosed as its own incident; else a deployment the first round's events showed scaled to nothing, if
        it still is; else, when the alerted service itself was mended, the dependency its new pod's logs blame; else
        what the users' entry tier still blames (`_users`); else, the last look before finishing, the events again: a
        deployment they show scaled to nothing since (a fault that arrived while the agent worked: a deployment
        without pods is missing from the listing), or one they show rolled out since whose rollout does not finish
        (its new pods may not fail yet at the listing). None: nothing observable is failing any more."""
        fixed = set().union(*(remedy.targets for remedy in done))
        pods = _pods(r.read("list_pods"))
        events = first.outputs.get(_key("get_events", {}), "")
        failing = next((p.deployment for p in pods if p.sick and p.status != "Completed"), None)
        if failing is not None:
            return self._service(r, failing, pods, events, caller=failing)
        if found := self._scaled_since(r, events, pods, fixed):
            return found
        if service in fixed:  # the alerted service was mended: do its calls now fail further down?
            own = [p for p in pods if p.deployment == service and p.status == "Running"]
            described = first.outputs.get(_key("describe", {"kind": "deployment", "name": service}))
            if own and described is not None:
                logs = r.read("get_logs", pod=own[0].name)
                counts = _blame(logs, _dependency_names(described) - fixed - {service})
                if counts and counts.most_common(1)[0][1] >= MIN_UPSTREAM_SCORE:
                    if remedy := self._upstream(r, service, counts.most_common(1)[0][0], logs, pods, events):
                        return remedy
        if remedy := self._users(r, pods, events, checked=service if service in fixed else None):
            return remedy
        now = r.read("get_events")
        if found := self._scaled_since(r, now, pods, fixed):
            return found
        for name in _rolled_out_meanwhile(events, now, fixed):  # a rollout that began while the agent worked
            if not ROLLED_OUT.search(r.read("rollout_status", deployment=name)):  # its pods listed afresh, by selector
                selector = SELECTOR.search(r.read("describe", kind="deployment", name=name))
                if selector is not None:
                    return self._service(r, name, _pods(r.read("list_pods", selector=selector["selector"])), now,
                                         caller=name)
        return None

    def _users(self, r: Reads, pods: list[Pod], events: str, checked: str | None) -> Remedy | None:
        """Before finishing: do the users' requests succeed now? A fault that shows in no pod (a Service that
        reaches no pod, or the wrong port) shows in its callers' errors, and failures of critical calls climb
        towards the users: the entry tier's logs (`tier=web`, where the users' requests come in) name what still
        fails. Follow that blame down, service by service, to the one at fault itself (its pods, its Service's
        wiring or port, a policy), as for the alerted service's own dependencies. `checked`: an entry deployment
        whose new pod's logs this round already read."""
        entry = [p for p in _pods(r.read("list_pods", selector=ENTRY_TIER)) if p.status == "Running" and not p.sick]
        if not entry or entry[0].deployment == checked:
            return None
        caller, logs, followed = entry[0].deployment, r.read("get_logs", pod=entry[0].name), set[str]()
        while True:
            counts = _blame(logs, _dependency_names(r.read("describe", kind="deployment", name=caller)) - followed
                            - {caller})
            if not counts or counts.most_common(1)[0][1] < MIN_UPSTREAM_SCORE:
                return None
            upstream = counts.most_common(1)[0][0]
            if remedy := self._upstream(r, caller, upstream, logs, pods, events):
                return remedy
            serving = [p for p in pods if p.deployment == upstream and p.status == "Running" and not p.sick]
            if not serving:
                return None
            followed.add(caller)  # well itself: its own calls fail further down
            caller, logs = upstream, r.read("get_logs", pod=serving[0].name)

    def _scaled_since(self, r: Reads, events: str, pods: list[Pod], fixed: set[str]) -> Remedy | None:
        """A deployment `events` show scaled to nothing that is not fixed and still has no pod."""
        for m in SCALED_TO_NOTHING.finditer(events):
            if m["name"] not in fixed and not any(p.deployment == m["name"] for p in pods):
                return self._service(r, m["name"], pods, events, caller=m["name"])
        return None

    def _service(self, r: Reads, name: str, pods: list[Pod], events: str, caller: str | None) -> Remedy | None:
        """A service that misbehaves: its own pods first, then what it depends on."""
        deployment = r.read("describe", kind="deployment", name=name)
        own = [p for p in pods if p.deployment == name and p.status != "Completed"]
        if _scaled_to_nothing(deployment):
            return self._scaled_to_zero(name, events)
        refused = next((m for m in QUOTA_EXCEEDED.finditer(events)
                        if f"replicaset/{name}-" in events[events.rfind("\n", 0, m.start()):m.start()]), None)
        if refused is not None:
            used, requested = int(refused["used"]), int(refused["requested"])
            hard = str(max(2 * used, used + requested))  # rule: room for every pod running now, twice over
            return Remedy((ToolCall(tool="patch_quota", args={"name": refused["name"], "hard": {"pods": hard}}),),
                          f"resource quota {refused['name']} allows {refused['limit']} pods while {used} run, so "
                          f"new pods of {name} are refused", _rollout_check(name))
        sick = sorted((p for p in own if p.sick), key=lambda p: (p.status == "Running", p.name))
        if sick:
            return self._pod(r, name, sick[0], deployment)
        if not own:
            return None
        if caller is not None:
            return None  # a dependency whose pods are all well: the problem is between the two (handled by the caller)
        if remedy := self._throttled(r, name, own, deployment):
            return remedy
        return self._dependencies(r, name, own, deployment, pods, events) or self._outside(r, name, own, deployment)

    def _throttled(self, r: Reads, name: str, own: list[Pod], deployment: str) -> Remedy | None:
        """Pods that run well but use their whole CPU limit: the CFS quota throttles them, so they are slow. Only a
        deployment with a CPU limit is looked at (`top` is read for it alone)."""
        limit = CPU_LIMIT.search(deployment)
        if limit is None:
            return None
        usage = [int(m["cpu"]) for m in TOP_ROW.finditer(r.read("top")) if m["pod"] in {p.name for p in own}]
        if not usage or min(usage) < THROTTLED * int(limit["cpu"]):
            return None
        change = _last_change(r.read("rollout_history", deployment=name))
        if not change or "cpu" not in change:
            return None
        return Remedy((ToolCall(tool="rollout_undo", args={"deployment": name}),),  # rule: undo what lowered it
                      f"pods of deployment {name} use their whole CPU limit of {limit['cpu']}m since its last change "
                      f"({_clip(change)}): CFS throttling makes them slow", _rollout_check(name))

    def _scaled_to_zero(self, name: str, events: str) -> Remedy:
        before = next((m for m in SCALED_FROM.finditer(events) if f"deployment/{name} " in
                       events[events.rfind("\n", 0, m.start()) + 1:m.start()]), None)
        replicas = scaled_from(before) if before else 1  # rule: the count it had, else one
        return Remedy((ToolCall(tool="scale", args={"deployment": name, "replicas": replicas}),),
                      f"deployment {name} is scaled to 0 replicas, so nothing serves it", _rollout_check(name))

    def _pod(self, r: Reads, name: str, pod: Pod, deployment: str) -> Remedy:
        if pod.status == "Pending":
            return self._pending(r, name, pod)
        if pod.status in ("CrashLoopBackOff", "Error") or (pod.restarted_recently and pod.status == "Running"):
            logs = program_text(r.read("get_logs", pod=pod.name, previous=True))
            if remedy := self._config_error(r, name, logs, deployment):
                return remedy
        described = r.read("describe", kind="pod", name=pod.name)
        change = _last_change(r.read("rollout_history", deployment=name))
        if pod.status in ("ErrImagePull", "ImagePullBackOff") and PULL_DENIED.search(described):
            return self._pull_denied(r, name, described, change)
        missing = MISSING_SECRET.search(described) if pod.status == "CreateContainerConfigError" else None
        if missing and not change:  # rule: gone from the cluster, its value is its owner's to restore
            secret = missing["name"] or missing["of"]
            if "not found" in r.read("get_resource", kind="secret", name=secret).lower() or missing["of"]:
                raise _Handover(f"secret {secret}, which deployment {name} reads at start-up, is missing or "
                                f"incomplete: its new pods fail with CreateContainerConfigError",
                                f"the value is in no object I can read and only its owner knows it: restore secret "
                                f"{secret}, then restart deployment {name}; I changed nothing")
        oom = "OOMKilled" in described or pod.status == "OOMKilled"
        killed = OOM_RUN.search(described)
        served = age_seconds(killed["started"]) - age_seconds(killed["finished"]) if killed else 0.0
        if oom and served >= LEAK_RUN_S:  # rule: it served, then grew into its limit: a leak, which a higher
            history = r.read("rollout_history", deployment=name)  # limit only postpones
            if change and "image" in change:
                return Remedy((ToolCall(tool="rollout_undo", args={"deployment": name}),),
                              f"containers of deployment {name} are OOMKilled after serving {served:.0f}s each "
                              f"since its last change ({_clip(change)}): the new build's memory grows until "
                              f"the limit", _rollout_check(name))
            if len(REVISION_LINE.findall(history)) < 2:
                raise _Handover(f"containers of deployment {name} are OOMKilled after serving {served:.0f}s each: "
                                f"its memory grows until the limit, and it keeps no earlier revision to roll back "
                                f"to", "a higher limit only postpones the next kill: its owner must ship a build "
                                "without the leak or name the one to go back to; I changed nothing")
        if oom and change and "resources" in change:
            return self._undo(r, name, f"containers of deployment {name} are OOMKilled since its last change "
                                       f"lowered their resources ({_clip(change)})")
        if oom:
            limit = MEMORY_LIMIT.search(described)
            seen = int(limit["value"]) * MIB[limit["unit"]] if limit else 128
            new = f"{max(int(seen * 4), 512)}Mi"  # rule: four times the limit it was killed at, at least 512Mi
            container = re.search(r"^Containers:\n\s+(?P<c>[-a-z0-9]+):", described, re.MULTILINE)
            return Remedy((ToolCall(tool="set_resources", args={
                "deployment": name, "container": container["c"] if container else name, "memory_limit": new}),),
                f"containers of deployment {name} are OOMKilled at their memory limit"
                + (f" of {limit['value']}{limit['unit']}" if limit else ""), _rollout_check(name))
        symptom = pod.status if pod.status != "Running" else "its pods never become ready"
        if change:
            return self._undo(r, name, f"the last change to deployment {name} ({_clip(change)}) broke it: {symptom}")
        state = pod.status if pod.status != "Running" else "never ready"
        return Remedy((ToolCall(tool="rollout_restart", args={"deployment": name}),),
                      f"pod {pod.name} of deployment {name} is {state} with no change to its template",
                      _rollout_check(name))

    def _undo(self, r: Reads, name: str, diagnosis: str) -> Remedy:
        """Back to the revision before the current one, as `rollout_undo` goes. That revision may be a bad rollout
        of its own, stacked under the current one: one that sets a memory limit below what the deployment's pods
        use now (`top`) would be OOMKilled once it runs, so the undo goes past it (`to_revision`); and should the
        revision it lands on not roll out either, the fallback goes back one revision further. Both read the
        history as it was before the undo (an undo renumbers the revision it restores)."""
        rows = [(int(m["revision"]), m["change"]) for m in
                REVISION_ROW.finditer(r.read("rollout_history", deployment=name))]
        landed = len(rows) - 2
        while landed > 0 and (limit := LIMITED_TO.search(rows[landed][1])):
            allowed = int(limit["value"]) * MIB[limit["unit"]]
            used = max((int(m["memory"]) for m in TOP_MEMORY.finditer(r.read("top"))
                        if deployment_of(m["pod"]) == name), default=0)
            if used <= allowed:
                break
            diagnosis += f"; revision {rows[landed][0]} before it limits memory to {limit['value']}{limit['unit']}, " \
                         f"below the {used}Mi its pods use"
            landed -= 1
        if landed < 0:
            return Remedy((ToolCall(tool="rollout_undo", args={"deployment": name}),), diagnosis, _rollout_check(name))
        to = {} if landed == len(rows) - 2 else {"to_revision": rows[landed][0]}
        fallback = None if landed == 0 else Remedy(
            (ToolCall(tool="rollout_undo", args={"deployment": name, "to_revision": rows[landed - 1][0]}),),
            f"{diagnosis}; revision {rows[landed][0]} under it fails too", _rollout_check(name))
        return Remedy((ToolCall(tool="rollout_undo", args={"deployment": name, **to}),), diagnosis,
                      _rollout_check(name), fallback)

    def _pending(self, r: Reads, name: str, pod: Pod) -> Remedy:
        described = r.read("describe", kind="pod", name=pod.name)
        message = (SCHEDULER.search(described) or SCHEDULER.search(r.read("get_events")))
        why = message["message"] if message else ""
        if untolerated := UNTOLERATED.search(why):  # rule: a taint is its node owner's, no tool of mine lifts it
            selectors = NODE_SELECTORS.search(described)
            wanted = set((selectors["selectors"] if selectors else "<none>").split(",")) - {"<none>"}
            taint = f"{untolerated['key']}={untolerated['value']}:NoSchedule".replace("=:", ":")
            pool = [m["name"] for m in NODE_ROW.finditer(r.read("list_nodes")) if wanted <= set(m["labels"].split(","))]
            tainted = [n for n in pool if re.search(rf"^Taints:.*\b{re.escape(taint)}",
                                                    r.read("describe", kind="node", name=n), re.MULTILINE)]
            if tainted:
                raise _Handover(f"nodes {', '.join(tainted)} carry taint {taint}, which deployment {name} does not "
                                f"tolerate: its new pods stay Pending", "a taint is its node owner's to lift, not "
                                "mine: remove it, or say where to run instead; I changed nothing")
        claim = MISSING_CLAIM.search(why) or (CLAIM_NAME.search(described) if UNBOUND_CLAIMS in why else None)
        if claim and (remedy := self._unusable_claim(r, name, claim["name"], "not found" in claim.group(0))):
            return remedy
        if "were unschedulable" in why:
            selectors = NODE_SELECTORS.search(described)
            wanted = set((selectors["selectors"] if selectors else "<none>").split(",")) - {"<none>"}
            nodes = [m for m in NODE_ROW.finditer(r.read("list_nodes")) if "SchedulingDisabled" in m["status"]
                     and wanted <= set(m["labels"].split(","))]
            if nodes:
                return Remedy(tuple(ToolCall(tool="uncordon", args={"node": n["name"]}) for n in nodes),
                              f"node {', '.join(n['name'] for n in nodes)} is cordoned and is where deployment {name} "
                              f"may run ({', '.join(sorted(wanted)) or 'any node'})", _rollout_check(name))
        if "node affinity/selector" in why:
            change = _last_change(r.read("rollout_history", deployment=name))
            if change and ("nodeSelector" in change or "affinity" in change):  # rule: undo the change that broke it,
                return self._undo(r, name, f"pods of deployment {name} fit no node since its last change set "
                                           f"their placement ({_clip(change)})")  # keeping older pins
            selectors = NODE_SELECTORS.search(described)
            wanted = set((selectors["selectors"] if selectors else "<none>").split(",")) - {"<none>"}
            listing = r.read("list_nodes")
            if not any(wanted <= set(m["labels"].split(",")) for m in NODE_ROW.finditer(listing)) or not wanted:
                return Remedy((ToolCall(tool="remove_scheduling_constraints", args={"deployment": name}),),
                              f"no node carries the labels deployment {name} asks for "
                              f"({', '.join(sorted(wanted)) or 'its affinity'})", _rollout_check(name))
        if change := _last_change(r.read("rollout_history", deployment=name)):
            return self._undo(r, name, f"pods of deployment {name} cannot be scheduled since its last change "
                                       f"({_clip(change)}): {_scheduler_reason(why)}")
        return Remedy((ToolCall(tool="rollout_restart", args={"deployment": name}),),
                      f"pods of deployment {name} are Pending: {_scheduler_reason(why)}", _rollout_check(name))

    def _pull_denied(self, r: Reads, name: str, described: str, change: str | None) -> Remedy:
        """The registry answers 401 to the pod's credentials. Rule: when the last change swapped the image pull
        secret and the one named before holds credentials for the registry, going back pulls with it again; with no
        such secret left, only the registry's owner can issue credentials (no tool creates a secret): hand it over."""
        swapped = PULL_SECRET_CHANGED.search(change or "")
        registry = re.search(r"https://(?P<host>[-a-z0-9.:]+)/v2/", described)
        if swapped and registry:
            before = r.read("get_resource", kind="secret", name=swapped["was"].split(",")[0])
            if f"credentials for {registry['host']}" in before:
                return Remedy((ToolCall(tool="rollout_undo", args={"deployment": name}),),
                              f"the last change to deployment {name} pulls with secret {swapped['now']}, which the "
                              f"registry refuses (401); {swapped['was']} holds its credentials", _rollout_check(name))
        named = PULL_SECRETS.search(described)
        secret = named["names"].split(",")[0] if named else None
        state = "it names no image pull secret" if secret is None else f"image pull secret {secret} is missing" \
            if "not found" in r.read("get_resource", kind="secret", name=secret).lower() else \
            f"the registry refuses image pull secret {secret}"
        raise _Handover(f"pods of deployment {name} cannot pull their image (401 Unauthorized): {state}",
                        "only the registry's owner can issue credentials: restore the pull secret; I changed nothing")

    def _unusable_claim(self, r: Reads, name: str, claim: str, missing: bool) -> Remedy | None:
        """A pod Pending on a claim that does not exist (`missing`) or is not bound. Rule: when the last change renamed
        the claim and the one it named before is Bound, going back mounts that data again; a claim that is simply gone
        took its data with it, and no tool of mine makes storage (an empty volume would start the store without its
        data): hand it over."""
        change = _last_change(r.read("rollout_history", deployment=name)) or ""
        renamed = next((m for m in RENAMED_CLAIM.finditer(change) if m["now"] == claim), None)
        if renamed and BOUND.search(r.read("get_resource", kind="persistentvolumeclaim", name=renamed["was"])):
            return Remedy((ToolCall(tool="rollout_undo", args={"deployment": name}),),
                          f"the last change to deployment {name} claims volume {claim}, which "
                          f"{'does not exist' if missing else 'is not bound'}; its claim before, {renamed['was']}, is "
                          f"Bound", _rollout_check(name))
        if missing and "not found" in r.read("get_resource", kind="persistentvolumeclaim", name=claim).lower():
            raise _Handover(f"persistentvolumeclaim {claim}, which deployment {name} mounts, is gone: its new pods "
                            f"stay Pending", f"no tool of mine makes storage and an empty volume would lose the data: "
                            f"restore claim {claim} and its volume; I changed nothing")
        return None  # there by now, or unbound for a reason of its own: the general rules below

    def _config_error(self, r: Reads, name: str, logs: str, deployment: str) -> Remedy | None:
        """A crash whose last words name a bad setting, or a database that refuses the password."""
        for ref in CONFIG_MAP_REF.finditer(deployment):
            if not re.search(rf"\b(?:{re.escape(ref['env'])}|{re.escape(ref['key'])})\b", logs):
                continue
            if bad := NUMBER_WITH_UNIT.search(logs):  # rule: keep the number, drop the stray unit
                return self._set_key(name, "configmap", ref["name"], ref["key"], bad["digits"],
                                     f"config map {ref['name']} sets {ref['key']}={bad.group(0)}, which deployment "
                                     f"{name} cannot parse as a number")
            if enum := ALLOWED_VALUES.search(logs):  # rule: the first value the service says it accepts
                choice = enum["choices"].split(", ")[0]
                return self._set_key(name, "configmap", ref["name"], ref["key"], choice,
                                     f"config map {ref['name']} sets {ref['key']} to a value deployment {name} "
                                     f"rejects (allowed: {enum['choices'].strip()})")
        if PASSWORD_REJECTED.search(logs):
            secret = next((m for m in SECRET_REF.finditer(deployment) if DB_PASSWORD_ENV.search(m["env"])), None)
            host = next((m["value"] for m in ENV_LINE.finditer(deployment) if m["env"].endswith("_HOST")), None)
            if secret is None or host is None:
                return None
            database = r.read("describe", kind="deployment", name=host)
            theirs = next((m for m in SECRET_REF.finditer(database) if DB_PASSWORD_ENV.search(m["env"])), None)
            if theirs is None:
                return None
            stored = r.read("get_resource", kind="secret", name=theirs["name"])
            value = re.search(rf"^\s+{re.escape(theirs['key'])}:\s+(?P<v>\S+)\s*$", stored, re.MULTILINE)
            if value is None:
                return None
            return self._set_key(name, "secret", secret["name"], secret["key"], value["v"].strip("'\""),
                                 f"{name}'s secret {secret['name']} holds a {secret['key']} that database {host} "
                                 f"rejects; its own secret {theirs['name']} holds the one it expects")
        return None

    @staticmethod
    def _set_key(name: str, kind: str, obj: str, key: str, value: str, diagnosis: str) -> Remedy:
        """A setting read at start-up: fix it, then restart the deployment so that it reads it again."""
        return Remedy((ToolCall(tool="set_config_key", args={"kind": kind, "name": obj, "key": key, "value": value}),
                       ToolCall(tool="rollout_restart", args={"deployment": name})), diagnosis, _rollout_check(name))

    # --- dependencies -------------------------------------------------------------------------------------------

    def _dependencies(self, r: Reads, name: str, own: list[Pod], deployment: str, pods: list[Pod],
                      events: str) -> Remedy | None:
        """The alerted service runs fine: follow the errors in its logs to the dependency they name."""
        if remedy := self._wiring(r, name, deployment, r.read("get_endpoints", service=name), "it serves nothing"):
            return remedy
        names = _dependency_names(deployment) - {name}
        counts: Counter[str] = Counter()
        logs = ""
        for pod in own[:2]:  # a second replica when the first one's recent lines show nothing
            logs += r.read("get_logs", pod=pod.name) + "\n"
            counts = _blame(logs, names)
            if counts and counts.most_common(1)[0][1] >= MIN_UPSTREAM_SCORE:
                upstream = counts.most_common(1)[0][0]
                break
        else:  # quiet logs: a dependency the events show scaled to nothing is still a suspect, and so is one whose
            # pods all idle at no CPU while this service serves: none of its callers' requests reaches them
            gone = [d for d in sorted(names) if re.search(rf"deployment/{re.escape(d)}\s+Scaled down replica set \S+ "
                                                          r"(?:to 0 from|from \d+ to 0\b)", events)]
            suspects = gone or _idle(r.read("top"), pods, names)
            if not suspects:
                return None
            upstream = suspects[0]
        return self._upstream(r, name, upstream, logs, pods, events)

    def _upstream(self, r: Reads, name: str, upstream: str, logs: str, pods: list[Pod], events: str) -> Remedy | None:
        """The dependency `name`'s logs blame: scaled to nothing, its own pods failing, its Service's wiring, or a
        network policy that drops `name`'s calls (most of them time out)."""
        failing = [line for line in program_text(logs).splitlines() if upstream in line
                   and (ERROR_LINE.search(line) or HARD_FAILURE.search(line))]
        timeouts = sum(bool(TIMEOUT.search(line)) for line in failing) * 2 > len(failing)
        theirs = r.read("describe", kind="deployment", name=upstream)
        if _scaled_to_nothing(theirs):
            return self._scaled_to_zero(upstream, events)
        sick = [p for p in pods if p.deployment == upstream and p.sick]
        if sick:
            return self._pod(r, upstream, sick[0], theirs)
        endpoints = r.read("get_endpoints", service=upstream)
        if remedy := self._wiring(r, upstream, theirs, endpoints, f"{name}'s calls are refused"):
            return remedy
        if not timeouts and (remedy := self._service_port(r, name, upstream)):
            return remedy
        if timeouts:
            policies = r.read("list_network_policies")
            caller_app = f"app={name}"
            for m in NETPOL_ROW.finditer(policies):
                if m["selector"] == f"app={upstream}" and caller_app not in m["allows"] \
                        and not re.search(rf"app in \([^)]*\b{re.escape(name)}\b", m["allows"]):
                    if NAMED_PEERS.search(m["allows"]):
                        return self._admit(r, m["name"], name, upstream, m["allows"])
                    return Remedy((ToolCall(tool="delete_network_policy", args={"name": m["name"]}),),
                                  f"network policy {m['name']} lets only {m['allows'][:60]} reach {upstream}, so "
                                  f"{name}'s calls time out", ToolCall(tool="list_network_policies"))
        return None

    @staticmethod
    def _admit(r: Reads, policy: str, caller: str, upstream: str, allows: str) -> Remedy | None:
        """A least-privilege policy that names its callers and leaves this one out: name it too, keeping the
        policy (deleting it would let every pod of the namespace in). Rule: append the caller to the first `app In`
        list of the policy's ingress rules, read from the object itself."""
        text = r.read("get_resource", kind="networkpolicy", name=policy)
        obj = yaml.safe_load(text.split("\n", 1)[1] if text.startswith("#") else text)
        rules = ((obj or {}).get("spec") or {}).get("ingress") if isinstance(obj, dict) else None
        for i, rule in enumerate(rules or []):
            for j, peer in enumerate(rule.get("from") or []):
                for k, e in enumerate((peer.get("podSelector") or {}).get("matchExpressions") or []):
                    if e.get("key") == "app" and e.get("operator") == "In":
                        path = f"/spec/ingress/{i}/from/{j}/podSelector/matchExpressions/{k}/values/-"
                        return Remedy((ToolCall(tool="patch", args={  # in the schema's order, as the grammar asks
                            "kind": "networkpolicy", "name": policy,
                            "patch": [{"op": "add", "path": path, "value": caller}], "patch_type": "json"}),),
                            f"network policy {policy} names the pods that may reach {upstream} ({_clip(allows)}) "
                            f"and leaves out {caller}, whose calls time out", ToolCall(tool="list_network_policies"))
        return None

    def _wiring(self, r: Reads, service: str, deployment: str, endpoints: str, harm: str) -> Remedy | None:
        """A Service whose pods run but that reaches none of them (selector) or the wrong port (targetPort)."""
        ready = endpoints.split("\nnot ready:")[0]
        ports = {m["port"] for m in ENDPOINT_PORT.finditer(ready)}
        container = CONTAINER_PORT.search(deployment)
        check = ToolCall(tool="get_endpoints", args={"service": service})
        if ports:
            if container is None or container["port"] in ports:
                return None
            port = int(container["port"])  # rule: the port its container listens on
            return Remedy((ToolCall(tool="patch_service", args={"service": service, "target_port": port}),),
                          f"service {service} forwards to port {','.join(sorted(ports))} but its pods listen on "
                          f"{port}, so {harm}", check)
        if "Error from server" in endpoints:
            return None
        described = r.read("describe", kind="service", name=service)
        selector = SELECTOR.search(described)
        template = TEMPLATE_LABELS.search(deployment)
        if selector and template:
            labels = dict(kv.split("=", 1) for kv in template["labels"].split(",") if "=" in kv)
            wanted = dict(kv.split("=", 1) for kv in selector["selector"].split(",") if "=" in kv)
            fixed = {k: labels[k] for k in wanted if k in labels}  # rule: the same keys, the pods' own values
            if fixed and fixed != wanted:
                return Remedy((ToolCall(tool="patch_service", args={"service": service, "selector": fixed}),),
                              f"service {service} selects {selector['selector']} but its pods are labelled "
                              f"{','.join(f'{k}={v}' for k, v in fixed.items())}, so {harm}", check)
        target = TARGET_PORT.search(described)
        if container and target and target["port"] != container["port"]:
            port = int(container["port"])  # rule: the port its container listens on
            return Remedy((ToolCall(tool="patch_service", args={"service": service, "target_port": port}),),
                          f"service {service} forwards to port {target['port']}, which its pods do not expose "
                          f"(they listen on {port}), so {harm}", check)
        return None


    def _service_port(self, r: Reads, caller: str, service: str) -> Remedy | None:
        """A Service whose port is not the one its caller dials (its environment names `service:PORT`, or a
        `*_HOST` of `service` beside a `*_PORT`): kube-proxy refuses a port the Service does not declare."""
        env = {m["env"]: m["value"] for m in ENV_LINE.finditer(r.read("describe", kind="deployment", name=caller))}
        address = re.compile(rf"(?:^|[/@]){re.escape(service)}:(?P<port>\d+)")
        dialled = {m["port"] for v in env.values() if (m := address.search(v))}
        dialled |= {env[k[:-4] + "PORT"] for k, v in env.items() if k.endswith("HOST") and v == service
                    and env.get(k[:-4] + "PORT", "").isdigit()}
        ports = SERVICE_PORT.findall(r.read("describe", kind="service", name=service))
        if len(dialled) != 1 or len(ports) != 1 or ports[0] in dialled:
            return None
        port = int(next(iter(dialled)))  # rule: the port its callers dial
        return Remedy((ToolCall(tool="patch_service", args={"service": service, "port": port}),),
                      f"service {service} exposes port {ports[0]} but {caller} dials {service}:{port}, so its calls "
                      f"are refused", ToolCall(tool="describe", args={"kind": "service", "name": service}))

    def _capped_autoscaler(self, r: Reads, name: str) -> Remedy | None:
        """An autoscaler that scaled the deployment (its events say so) and is held at its maximum (ScalingLimited:
        TooManyReplicas): the count is its to set, so its maximum is raised rather than the deployment scaled."""
        for hpa in dict.fromkeys(HPA_EVENT.findall(r.read("get_events"))):
            described = r.read("describe", kind="horizontalpodautoscaler", name=hpa)
            metric, pods = HPA_UTILIZATION.search(described), HPA_PODS.search(described)
            if f"Reference: Deployment/{name}" not in described or "TooManyReplicas" not in described or \
                    metric is None or pods is None:
                continue
            # rule: what the autoscaler itself asks for, ceil(current pods x utilization / target)
            wanted = math.ceil(int(pods["current"]) * int(metric["used"]) / int(metric["target"]) - 1e-9)
            return Remedy((ToolCall(tool="set_hpa_max", args={"name": hpa, "max_replicas": wanted}),),
                          f"autoscaler {hpa} holds deployment {name} at its maximum of {pods['current']} pods "
                          f"(TooManyReplicas) while they run at {metric['used']}% of their CPU request against a "
                          f"{metric['target']}% target", _rollout_check(name))
        return None

    def _outside(self, r: Reads, name: str, own: list[Pod], deployment: str) -> Remedy | None:
        """A service whose pods, wiring and dependencies are all well: more traffic than its pods serve (their CPU
        far past their request), or users shut out by a policy that admits no other namespace."""
        request = CPU_REQUEST.search(deployment)
        usage = [int(m["cpu"]) for m in TOP_ROW.finditer(r.read("top")) if m["pod"] in {p.name for p in own}]
        if remedy := self._capped_autoscaler(r, name):
            return remedy
        if request and usage and sum(usage) > len(usage) * int(request["cpu"]) * SATURATED:
            # rule: as its autoscaler would, enough pods for 70% of the request each at today's usage
            replicas = math.ceil(sum(usage) / (int(request["cpu"]) * HPA_TARGET) - 1e-9)
            return Remedy((ToolCall(tool="scale", args={"deployment": name, "replicas": replicas}),),
                          f"{name}'s {len(usage)} pods use {sum(usage)}m of CPU against {request['cpu']}m requested "
                          f"each: more traffic than they serve", _rollout_check(name))
        for m in NETPOL_ROW.finditer(r.read("list_network_policies")):
            # Only a policy that admits every pod of its namespace (`<none>`: the empty selector) and no other keeps
            # out nothing but outside traffic; one that names its callers (`app in (…)`) is least privilege, and
            # whether it shuts a caller out is for the callers' rule to judge.
            peers = [rule.split(" on ")[0] for rule in m["allows"].split("; ")]
            if m["selector"] == f"app={name}" and peers and all(peer == "<none>" for peer in peers):
                return Remedy((ToolCall(tool="delete_network_policy", args={"name": m["name"]}),),
                              f"network policy {m['name']} lets only {m['allows'][:60]} reach {name}, so traffic from "
                              "outside the namespace (the users, through the ingress) is dropped",
                              ToolCall(tool="list_network_policies"))
        return None
