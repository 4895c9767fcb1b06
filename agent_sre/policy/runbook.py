"""The runbook policy: what a careful on-call engineer does from a wiki page, as rules over kubectl output.

It is the baseline and the SFT teacher. Like a real runbook it is good but not perfect: it never looks at
NetworkPolicies or Service wiring, treats every crash loop as a bad rollout (a corrupted Secret survives a
rollback), and restarts a deployment whose pod restarted minutes ago, whatever the cause. It acts only on what it
read about the pod it blames (a day-old OOMKill elsewhere is not evidence), confirms a scale to zero on the
deployment before scaling it back to the count it had, and looks for a cordon where kubectl shows one. After a fix
it waits for the rollout and escalates to a human if it never becomes available, so a failed fix is handed over
rather than claimed, as is a fix the cluster refuses (a fix that rolls out but cures nothing is still claimed).
Once a fix rolls out it lists the pods again and, while a deployment it has not fixed still has an unhealthy pod,
applies the same rules to that pod (several faults at once, issue #40); what its rules never look at (a Service, a
scale to zero it read no event of) stays unseen.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import NamedTuple

from agent_sre.models.remediation import PolicyRef
from agent_sre.models.tools import TOOL_SPECS, ToolCall
from agent_sre.models.trajectory import Step, Trajectory
from agent_sre.policy.base import ActionPolicy
from agent_sre.policy.evidence import (
    CHAOS_KIND_CASE,
    CHAOS_ROW,
    CHAOS_SLASH,
    MEMORY_LIMIT,
    MIB,
    REPLICAS,
    ROLLED_OUT,
    SCALED_FROM,
    Pod,
    age_seconds,
    object_name,
    pods,
    program_text,
    scaled_from,
)

NODE_CORDONED = re.compile(r"^(?P<name>[-a-z0-9.]+)\s.*SchedulingDisabled", re.MULTILINE)
QUOTA_NAME = re.compile(r'exceeded quota: (?P<name>[-a-z0-9]+)')
OOM_KILLED = re.compile(r"Reason:\s+OOMKilled")
MAX_ERROR_CHARS = 80  # of a failed fix's error, quoted in its escalation (which stays within MAX_ACTION_TOKENS)
BROKEN_REVISION = {  # symptoms a rollback answers, in words
    "ImagePullBackOff": "its image cannot be pulled", "ErrImagePull": "its image cannot be pulled",
    "CrashLoopBackOff": "its containers crash-loop", "Readiness probe failed": "its pods never get ready",
    "Init:": "an init container does not complete",
    "Insufficient cpu": "its pods request more CPU than any node has free",
    "Insufficient memory": "its pods request more memory than any node has free"}
UNHEALTHY = ("CrashLoopBackOff", "Error", "ImagePullBackOff", "ErrImagePull", "OOMKilled", "Pending",
             "CreateContainerConfigError", "Init:", "ContainerCreating")


@dataclass
class Evidence:
    """What the runbook has read so far, call by call, and what it already did."""

    reads: list[tuple[ToolCall, str]] = field(default_factory=list)

    @classmethod
    def of(cls, steps: list[Step]) -> Evidence:
        return cls([(s.action, s.result.output) for s in steps if s.action is not None and s.result is not None])

    @property
    def text(self) -> str:
        return "\n".join(program_text(output) if call.tool == "get_logs" else output for call, output in self.reads)

    def did(self, tool: str, **args: object) -> bool:
        return any(c.tool == tool and all(c.args.get(k) == v for k, v in args.items()) for c, _ in self.reads)

    def output(self, tool: str, **args: object) -> str:
        """The first answer to exactly this call, or "" if it was not made."""
        return next((out for c, out in self.reads if c.tool == tool and c.args == args), "")


def fresh(steps: list[Step]) -> list[Step]:
    """The steps since the namespace last changed under the agent (a write of it found stale, `ToolResult.stale`):
    the runbook reads again from there, as an engineer would after another one's fix."""
    last = max((i for i, s in enumerate(steps) if s.result is not None and s.result.stale), default=-1)
    return steps[last + 1:]


class Remedy(NamedTuple):
    """The runbook's fix and, in words, the fault it answers: the diagnosis the episode ends with."""

    call: ToolCall
    diagnosis: str


class RunbookPolicy(ActionPolicy):
    def choose(self, ref: PolicyRef, trajectory: Trajectory) -> ToolCall:
        """Investigate, fix, wait for the rollout; then, if the round's pod listing showed an unhealthy pod of a
        deployment not fixed yet, list the pods again and apply the same rules to the sickest such pod, round after
        round (a listing that showed nothing else costs no second look)."""
        steps = fresh(trajectory.steps)
        service = object_name(trajectory.incident.service)
        room = trajectory.incident.limits.max_steps - len(trajectory.steps)
        done: list[str] = []  # the faults whose fix rolled out, in words
        fixed: set[str] = set()
        start, listed = 0, ""
        while True:
            part = steps[start:]
            ev = Evidence.of(part)
            alerted = None if done else service
            if done and _worst_pod(listed, None, fixed) is None:
                return _finish("; ".join(done), ROLLED_OUT_SUMMARY)
            for call in self._investigation(ev, alerted, fixed, again=bool(done)):
                if not ev.did(call.tool, **call.args):
                    if done and room < 2:
                        return _finish("; ".join(done), ROLLED_OUT_SUMMARY)
                    return call
            writes = [s for s in part if s.action is not None and TOOL_SPECS[s.action.tool].write]
            if fixes := [s.action for s in writes if s.action is not None and s.result is not None and s.result.ok]:
                fix = fixes[0]  # one fix a round: the next round's, if any, comes after this one's check
                diagnosis = self._diagnosis(part, alerted, fix, fixed)
                target = alerted or fix.args.get("deployment")
                if not isinstance(target, str) or room < 2:  # with one step left there is no room to check
                    return _finish("; ".join([*done, diagnosis]), "applied the runbook remediation")
                check = ToolCall(tool="rollout_status", args={"deployment": target})
                applied = next(i for i, s in enumerate(part) if s.action == fix)
                checked = [(i, s.result.output) for i, s in enumerate(part)
                           if i > applied and s.action == check and s.result is not None]
                if not checked:
                    return check
                at, status = checked[0]
                if not ROLLED_OUT.search(status):
                    last = status.splitlines()[-1] if status else "no answer"
                    return ToolCall(tool="escalate", args={
                        "diagnosis": f"{diagnosis}; {fix.tool} did not fix deployment/{target}{_after(fixed)}",
                        "summary": f"rollout status: {last}"})
                done.append(diagnosis)
                listed = ev.output("list_pods")
                fixed |= {target, *(d for d in [fix.args.get("deployment")] if isinstance(d, str))}
                start += at + 1
                continue
            if writes:
                return self._hand_over(part, writes[-1], alerted, fixed)
            if not done and len(steps) < len(trajectory.steps) and _worst_pod(ev.output("list_pods"), service) is None:
                return _finish("no fault left: another remediation of the namespace fixed it meanwhile",
                               "read the namespace again after another remediation's write; nothing is unhealthy")
            remedy = self._remediation(ev, alerted, fixed)
            if remedy is not None:
                return remedy.call
            if done:
                return _finish("; ".join(done), f"{ROLLED_OUT_SUMMARY}; no other pod is unhealthy")
            return _finish("no fault found", "no actionable fault found; likely a false alarm")

    def _hand_over(self, part: list[Step], failed: Step, service: str | None, fixed: Collection[str]) -> ToolCall:
        """A fix the cluster (or a guardrail) refused is neither claimed nor retried blindly: a human gets the fault,
        the fix and its error."""
        assert failed.action is not None
        fix, output = failed.action, failed.result.output if failed.result is not None else ""
        error = next((line for line in output.splitlines() if line.strip()), "no answer")
        diagnosis = f"{self._diagnosis(part, service, fix, fixed)}; {fix.tool} failed{_after(fixed)}"
        return ToolCall(tool="escalate", args={"diagnosis": diagnosis,
                                               "summary": f"{fix.tool}: {error[:MAX_ERROR_CHARS]}"})

    def _diagnosis(self, part: list[Step], service: str | None, fix: ToolCall, fixed: Collection[str]) -> str:
        """The fault the fix answered, in words: the remediation rules re-read on what the round knew before it."""
        before = part[:next(i for i, s in enumerate(part) if s.action == fix)]
        remedy = self._remediation(Evidence.of(before), service, fixed)
        return remedy.diagnosis if remedy is not None and remedy.call == fix else f"{fix.tool} {fix.args}"

    def _investigation(self, ev: Evidence, service: str | None, skip: Collection[str] = (),
                       again: bool = False) -> list[ToolCall]:
        """What to read: the namespace, the alerting service and the sickest pod; `again` (after a fix rolled out),
        only the pods and the sickest pod of a deployment not in `skip`."""
        pod = _worst_pod(ev.output("list_pods"), service, skip)
        if again:
            return [ToolCall(tool="list_pods"), *_pod_reads(pod)]
        calls = [ToolCall(tool="list_pods"), ToolCall(tool="get_events"), ToolCall(tool="list_chaos_experiments")]
        if service:
            calls += [ToolCall(tool="describe", args={"kind": "deployment", "name": service}),
                      ToolCall(tool="get_endpoints", args={"service": service})]
        # A scale-down to zero is confirmed on the deployment before anything is scaled: during a rolling update
        # the old replica set goes to zero too, and the event that says so may be all a long event list shows.
        calls += [ToolCall(tool="describe", args={"kind": "deployment", "name": name})
                  for name in _scaled_down(ev) if name != service]
        return calls + _pod_reads(pod)

    def _remediation(self, ev: Evidence, service: str | None, skip: Collection[str] = ()) -> Remedy | None:
        chaos = CHAOS_ROW.search(ev.text) or CHAOS_SLASH.search(ev.text)
        if chaos is not None:
            kind = CHAOS_KIND_CASE.get(chaos["kind"].lower(), chaos["kind"])
            return Remedy(ToolCall(tool="delete_chaos_experiment", args={"kind": kind, "name": chaos["name"]}),
                          f"chaos experiment {kind}/{chaos['name']} is injecting faults")
        for name, replicas in _scaled_down(ev).items():
            desired = REPLICAS.search(ev.output("describe", kind="deployment", name=name))
            if desired is not None and desired["desired"] == "0":  # back to the count it had before
                return Remedy(ToolCall(tool="scale", args={"deployment": name, "replicas": replicas}),
                              f"deployment {name} was scaled to zero replicas (from {replicas})")
        pod = _worst_pod(ev.output("list_pods"), service, skip)
        deployment = pod.deployment if pod is not None else service
        if deployment is None:
            return None
        own = _symptoms(ev, pod, deployment)
        described = ev.output("describe", kind="pod", name=pod.name) if pod is not None else ""
        if pod is not None and (pod.status == "OOMKilled" or OOM_KILLED.search(described) and pod.restarted_recently):
            limit = MEMORY_LIMIT.search(described)  # the limit this pod was killed at, not another's
            seen_mib = int(limit["value"]) * MIB[limit["unit"]] if limit else 0
            new = f"{max(int(seen_mib * 4), 512)}Mi"  # the runbook's generous bump; the leak hunt comes later
            # The runbook's convention: a deployment's main container carries its name.
            return Remedy(ToolCall(tool="set_resources", args={"deployment": deployment, "container": deployment,
                                                               "memory_limit": new}),
                          f"deployment {deployment} is OOMKilled at its memory limit"
                          + (f" of {limit['value']}{limit['unit']}" if limit else ""))
        if cordoned := NODE_CORDONED.search(ev.output("list_nodes")):
            return Remedy(ToolCall(tool="uncordon", args={"node": cordoned["name"]}),
                          f"node {cordoned['name']} is cordoned, so pods of deployment {deployment} cannot be placed")
        if "node affinity/selector" in own:
            return Remedy(ToolCall(tool="remove_scheduling_constraints", args={"deployment": deployment}),
                          f"pods of deployment {deployment} match no node's affinity/selector")
        if quota := QUOTA_NAME.search(ev.text):
            return Remedy(ToolCall(tool="patch_quota", args={"name": quota["name"],
                                                             "hard": {"pods": "50", "requests.cpu": "20",
                                                                      "requests.memory": "40Gi"}}),
                          f"resource quota {quota['name']} is exhausted, so new pods are refused")
        failing = next((words for needle, words in BROKEN_REVISION.items() if needle in own), None)
        if failing is not None:
            return Remedy(ToolCall(tool="rollout_undo", args={"deployment": deployment}),
                          f"the current revision of deployment {deployment} is broken: {failing}")
        if pod is not None and pod.restarted_recently:
            return Remedy(ToolCall(tool="rollout_restart", args={"deployment": deployment}),
                          f"pod {pod.name} of deployment {deployment} keeps restarting ({pod.restarts} restarts)")
        return None


def _scaled_down(ev: Evidence) -> dict[str, int]:
    """Deployments an event says went to zero replicas outside a rollout, with the count they had."""
    events = ev.output("get_events")
    found: dict[str, int] = {}
    for line in events.splitlines():
        went = SCALED_FROM.search(line)
        name = re.search(r"deployment/(?P<name>[-a-z0-9]+)\s", line)
        if went and name and not re.search(rf"deployment/{name['name']}\s+Scaled up", events):
            found.setdefault(name["name"], scaled_from(went))
    return found


def _symptoms(ev: Evidence, pod: Pod | None, deployment: str) -> str:
    """What was read about the deployment's own pods: the sick pod's status, description and logs, and the events
    of its deployment's pods — not a symptom some other object shows."""
    events = [line for line in ev.output("get_events").splitlines() if f"pod/{deployment}-" in line]
    if pod is None:
        return "\n".join(events)
    return "\n".join([pod.status, ev.output("describe", kind="pod", name=pod.name),
                      program_text(ev.output("get_logs", pod=pod.name, previous=True)), *events])


def _pod_reads(pod: Pod | None) -> list[ToolCall]:
    """What the runbook reads about the pod it blames."""
    if pod is None:
        return []
    calls = [ToolCall(tool="describe", args={"kind": "pod", "name": pod.name})]
    if pod.restart_count > 0:
        calls.append(ToolCall(tool="get_logs", args={"pod": pod.name, "previous": True}))
    if pod.status == "Pending":
        calls.append(ToolCall(tool="list_nodes"))
    return calls


def _worst_pod(listing: str, service: str | None, skip: Collection[str] = ()) -> Pod | None:
    """The pod that looks sickest, preferring the alerting service's pods, then the newest (the one a change made);
    none of a deployment in `skip` (fixed already)."""
    ranked = []
    for pod in pods(listing):
        if pod.status == "Completed" or pod.deployment in skip:
            continue  # a finished Job's pod: not a symptom
        score = (4 if any(pod.status.startswith(u) for u in UNHEALTHY) else 0) + (2 if pod.unready else 0) \
            + (1 if pod.restarted_recently else 0)
        if score:
            ranked.append((score + (8 if service and pod.deployment == service else 0), -age_seconds(pod.age), pod))
    return max(ranked, key=lambda r: r[:2])[2] if ranked else None


ROLLED_OUT_SUMMARY = "applied the runbook remediation; it rolled out"


def _after(fixed: Collection[str]) -> str:
    """An escalation's word on the rounds before: the deployments already fixed, by name (their faults in full
    would not fit an action's tokens)."""
    return f"; after fixing {', '.join(sorted(fixed))}" if fixed else ""


def _finish(diagnosis: str, summary: str) -> ToolCall:
    return ToolCall(tool="finish", args={"diagnosis": diagnosis, "summary": summary})
