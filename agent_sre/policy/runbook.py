"""The runbook policy: what a careful on-call engineer does from a wiki page, as rules over kubectl output.

It is the baseline and the SFT teacher. Like a real runbook it is good but not perfect: it never looks at
NetworkPolicies or Service wiring, treats every crash loop as a bad rollout (a corrupted Secret survives a
rollback), and restarts anything that has been restarting — including benign noise on a false alarm. After a fix
it waits for the rollout and escalates to a human if it never becomes available, so a failed fix is handed over
rather than claimed, as is a fix the cluster refuses (a fix that rolls out but cures nothing is still claimed).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import NamedTuple

from agent_sre.models.remediation import PolicyRef
from agent_sre.models.tools import TOOL_SPECS, ToolCall
from agent_sre.models.trajectory import Step, Trajectory
from agent_sre.policy.base import ActionPolicy

POD_ROW = re.compile(r"^(?P<name>[a-z0-9][-a-z0-9.]*)\s+(?P<ready>\d+)/(?P<total>\d+)\s+(?P<status>\S+)\s+"
                     r"(?P<restarts>\d+)", re.MULTILINE)
CHAOS_ROW = re.compile(r"^(?P<kind>PodChaos|StressChaos|NetworkChaos|HTTPChaos|Schedule)\S*\s+(?P<name>\S+)",
                       re.MULTILINE)
CHAOS_SLASH = re.compile(r"(?P<kind>podchaos|stresschaos|networkchaos|httpchaos|schedule)[.\w-]*/(?P<name>[-a-z0-9]+)",
                         re.IGNORECASE)
NODE_CORDONED = re.compile(r"^(?P<name>[-a-z0-9.]+)\s.*SchedulingDisabled", re.MULTILINE)
MEMORY_LIMIT = re.compile(r"Limits:\s+(?:cpu=\S+\s+)?memory=(?P<value>\d+)(?P<unit>Ki|Mi|Gi)")
QUOTA_NAME = re.compile(r'exceeded quota: (?P<name>[-a-z0-9]+)')
SCALED_TO_ZERO = re.compile(r"deployment/(?P<name>[-a-z0-9]+)\s+Scaled down replica set \S+ (?:to 0 from|from \d+ to 0\b)")
MAX_ERROR_CHARS = 80  # of a failed fix's error, quoted in its escalation (which stays within MAX_ACTION_TOKENS)
ROLLED_OUT = re.compile(r'deployment "[-a-z0-9.]+" successfully rolled out')
CHAOS_KIND_CASE = {k.lower(): k for k in ("PodChaos", "StressChaos", "NetworkChaos", "HTTPChaos", "Schedule")}
BROKEN_REVISION = {  # symptoms a rollback answers, in words
    "ImagePullBackOff": "its image cannot be pulled", "ErrImagePull": "its image cannot be pulled",
    "CrashLoopBackOff": "its containers crash-loop", "Readiness probe failed": "its pods never get ready",
    "Init:": "an init container does not complete"}
UNHEALTHY = ("CrashLoopBackOff", "Error", "ImagePullBackOff", "ErrImagePull", "OOMKilled", "Pending",
             "CreateContainerConfigError", "Init:", "ContainerCreating")


@dataclass
class Evidence:
    """Everything the runbook has read so far, as text, plus what it already did."""

    text: str = ""
    done: list[ToolCall] = field(default_factory=list)

    def has(self, *needles: str) -> bool:
        return any(n in self.text for n in needles)

    def did(self, tool: str, **args: object) -> bool:
        return any(c.tool == tool and all(c.args.get(k) == v for k, v in args.items()) for c in self.done)


class Remedy(NamedTuple):
    """The runbook's fix and, in words, the fault it answers: the diagnosis the episode ends with."""

    call: ToolCall
    diagnosis: str


def deployment_of(pod: str) -> str:
    """`cart-7d9f8c6b5d-x2k4q` → `cart` (a Deployment's pods carry two generated suffixes)."""
    parts = pod.split("-")
    return "-".join(parts[:-2]) if len(parts) > 2 else pod


class RunbookPolicy(ActionPolicy):
    def choose(self, ref: PolicyRef, trajectory: Trajectory) -> ToolCall:
        ev = Evidence(done=[s.action for s in trajectory.steps if s.action is not None])
        ev.text = "\n".join(s.result.output for s in trajectory.steps if s.result is not None)
        service = trajectory.incident.service
        for call in self._investigation(ev, service):
            if not ev.did(call.tool, **call.args):
                return call
        writes = [s for s in trajectory.steps if s.action is not None and TOOL_SPECS[s.action.tool].write]
        if fixes := [s.action for s in writes if s.action is not None and s.result is not None and s.result.ok]:
            return self._after_fix(trajectory, ev, service, fixes[-1])
        if writes:
            return self._hand_over(trajectory, writes[-1], service)
        remedy = self._remediation(ev, service)
        return remedy.call if remedy is not None else _finish(
            "no fault found", "no actionable fault found; likely a false alarm")

    def _after_fix(self, trajectory: Trajectory, ev: Evidence, service: str | None, fix: ToolCall) -> ToolCall:
        """Check the fix the way the wiki says (`kubectl rollout status` on the alerting service's deployment, else
        the one it touched), then finish, or escalate if the rollout never became available. With one step left
        there is no room to check."""
        target = service or fix.args.get("deployment")
        if not isinstance(target, str) or len(trajectory.steps) + 2 > trajectory.incident.limits.max_steps:
            return _finish(self._diagnosis(trajectory, service, fix), "applied the runbook remediation")
        check = ToolCall(tool="rollout_status", args={"deployment": target})
        if not ev.did(check.tool, **check.args):
            return check
        diagnosis = self._diagnosis(trajectory, service, fix)
        status = next(s.result.output for s in reversed(trajectory.steps)
                      if s.action == check and s.result is not None)
        if ROLLED_OUT.search(status):
            return _finish(diagnosis, "applied the runbook remediation; it rolled out")
        last = status.splitlines()[-1] if status else "no answer"
        return ToolCall(tool="escalate", args={"diagnosis": f"{diagnosis}; {fix.tool} did not fix deployment/{target}",
                                               "summary": f"rollout status: {last}"})

    def _hand_over(self, trajectory: Trajectory, failed: Step, service: str | None) -> ToolCall:
        """A fix the cluster (or a guardrail) refused is neither claimed nor retried blindly: a human gets the fault,
        the fix and its error."""
        assert failed.action is not None
        fix, output = failed.action, failed.result.output if failed.result is not None else ""
        error = next((line for line in output.splitlines() if line.strip()), "no answer")
        return ToolCall(tool="escalate", args={"diagnosis": f"{self._diagnosis(trajectory, service, fix)}; "
                                                            f"{fix.tool} failed",
                                               "summary": f"{fix.tool}: {error[:MAX_ERROR_CHARS]}"})

    def _diagnosis(self, trajectory: Trajectory, service: str | None, fix: ToolCall) -> str:
        """The fault the fix answered, in words: the remediation rules re-read on what was known before it."""
        before = trajectory.steps[:next(i for i, s in enumerate(trajectory.steps) if s.action == fix)]
        remedy = self._remediation(Evidence(text="\n".join(s.result.output for s in before if s.result is not None)),
                                   service)
        return remedy.diagnosis if remedy is not None and remedy.call == fix else f"{fix.tool} {fix.args}"

    def _investigation(self, ev: Evidence, service: str | None) -> list[ToolCall]:
        calls = [ToolCall(tool="list_pods"), ToolCall(tool="get_events"), ToolCall(tool="list_chaos_experiments")]
        if service:
            calls += [ToolCall(tool="describe", args={"kind": "deployment", "name": service}),
                      ToolCall(tool="get_endpoints", args={"service": service})]
        pod = _worst_pod(ev.text, service)
        if pod is not None:
            calls.append(ToolCall(tool="describe", args={"kind": "pod", "name": pod["name"]}))
            if int(pod["restarts"]) > 0:
                calls.append(ToolCall(tool="get_logs", args={"pod": pod["name"], "previous": True}))
            if pod["status"] == "Pending":
                calls.append(ToolCall(tool="top", args={"kind": "nodes"}))
        return calls

    def _remediation(self, ev: Evidence, service: str | None) -> Remedy | None:
        chaos = CHAOS_ROW.search(ev.text) or CHAOS_SLASH.search(ev.text)
        if chaos is not None:
            kind = CHAOS_KIND_CASE.get(chaos["kind"].lower(), chaos["kind"])
            return Remedy(ToolCall(tool="delete_chaos_experiment", args={"kind": kind, "name": chaos["name"]}),
                          f"chaos experiment {kind}/{chaos['name']} is injecting faults")
        for zero in SCALED_TO_ZERO.finditer(ev.text):  # scaled to zero, and not as part of a rollout
            if not re.search(rf"deployment/{zero['name']}\s+Scaled up", ev.text):
                return Remedy(ToolCall(tool="scale", args={"deployment": zero["name"], "replicas": 1}),
                              f"deployment {zero['name']} was scaled to zero replicas")
        pod = _worst_pod(ev.text, service)
        deployment = deployment_of(pod["name"]) if pod is not None else service
        if deployment is None:
            return None
        if ev.has("OOMKilled"):
            limit = MEMORY_LIMIT.search(ev.text)
            seen_mib = int(limit["value"]) * {"Ki": 1 / 1024, "Mi": 1, "Gi": 1024}[limit["unit"]] if limit else 0
            new = f"{max(int(seen_mib * 4), 512)}Mi"  # the runbook's generous bump; the leak hunt comes later
            # The runbook's convention: a deployment's main container carries its name.
            return Remedy(ToolCall(tool="set_resources", args={"deployment": deployment, "container": deployment,
                                                               "memory_limit": new}),
                          f"deployment {deployment} is OOMKilled at its memory limit"
                          + (f" of {limit['value']}{limit['unit']}" if limit else ""))
        if cordoned := NODE_CORDONED.search(ev.text):
            return Remedy(ToolCall(tool="uncordon", args={"node": cordoned["name"]}),
                          f"node {cordoned['name']} is cordoned, so pods of deployment {deployment} cannot be placed")
        if ev.has("didn't match Pod's node affinity/selector", "node affinity/selector"):
            return Remedy(ToolCall(tool="remove_scheduling_constraints", args={"deployment": deployment}),
                          f"pods of deployment {deployment} match no node's affinity/selector")
        if quota := QUOTA_NAME.search(ev.text):
            return Remedy(ToolCall(tool="patch_quota", args={"name": quota["name"],
                                                             "hard": {"pods": "50", "requests.cpu": "20",
                                                                      "requests.memory": "40Gi"}}),
                          f"resource quota {quota['name']} is exhausted, so new pods are refused")
        failing = next((words for needle, words in BROKEN_REVISION.items() if ev.has(needle)), None)
        if failing is not None:
            return Remedy(ToolCall(tool="rollout_undo", args={"deployment": deployment}),
                          f"the current revision of deployment {deployment} is broken: {failing}")
        if pod is not None and int(pod["restarts"]) > 0:
            return Remedy(ToolCall(tool="rollout_restart", args={"deployment": deployment}),
                          f"pod {pod['name']} of deployment {deployment} keeps restarting ({pod['restarts']} restarts)")
        return None


def _worst_pod(text: str, service: str | None) -> dict[str, str] | None:
    """The pod that looks sickest, preferring the alerting service's pods."""
    best: tuple[int, dict[str, str]] | None = None
    for m in POD_ROW.finditer(text):
        row = m.groupdict()
        if row["status"] == "Completed":
            continue  # a finished Job's pod: not a symptom
        score = (4 if any(row["status"].startswith(u) for u in UNHEALTHY) else 0) \
            + (2 if row["ready"] != row["total"] else 0) + (1 if int(row["restarts"]) > 0 else 0)
        if score == 0:
            continue
        score += 8 if service and deployment_of(row["name"]) == service else 0
        if best is None or score > best[0]:
            best = (score, row)
    return best[1] if best else None


def _finish(diagnosis: str, summary: str) -> ToolCall:
    return ToolCall(tool="finish", args={"diagnosis": diagnosis, "summary": summary})
