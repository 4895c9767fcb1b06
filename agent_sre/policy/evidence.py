"""What the rule-based policies read in kubectl-like output: pod rows, chaos rows, scale events, limits, rollouts.

The runbook and the expert parse the same tool output; the patterns live here once, so a change to a tool's
format is one change here, and the two policies cannot disagree about what a row says.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from agent_sre.models.tools import NAME_PATTERN

POD_ROW = re.compile(r"^(?P<name>[a-z0-9][-a-z0-9.]*)\s+(?P<ready>\d+/\d+)\s+(?P<status>\S+)\s+"
                     r"(?P<restarts>\d+(?: \([^)]*\))?)\s+(?P<age>\S+)", re.MULTILINE)
RECENT = re.compile(r"\((?:\d+s|\d+m\d*s?|\d+m)\s+ago\)")  # a restart minutes ago, not the benign one of yesterday
# A row of `list_chaos_experiments`, not one a Schedule spawned (OWNER `schedule/x`): deleting that child does not
# end the fault, the next tick spawns another; the Schedule's own row is the one to act on.
CHAOS_ROW = re.compile(r"^(?P<kind>PodChaos|StressChaos|NetworkChaos|HTTPChaos|DNSChaos|IOChaos|Schedule)\S*\s+"
                       r"(?P<name>\S+)(?![^\n]*\sschedule/[-a-z0-9]+\s*$)", re.MULTILINE)
CHAOS_SLASH = re.compile(r"(?P<kind>podchaos|stresschaos|networkchaos|httpchaos|dnschaos|iochaos|schedule)[.\w-]*/"
                         r"(?P<name>[-a-z0-9]+)", re.IGNORECASE)
CHAOS_KIND_CASE = {k.lower(): k for k in ("PodChaos", "StressChaos", "NetworkChaos", "HTTPChaos", "DNSChaos", "IOChaos",
                                          "Schedule")}
ROLLED_OUT = re.compile(r'deployment "[-a-z0-9.]+" successfully rolled out')
MEMORY_LIMIT = re.compile(r"Limits:\s+(?:cpu=\S+\s+)?memory=(?P<value>\d+)(?P<unit>Ki|Mi|Gi)")
MIB = {"Ki": 1 / 1024, "Mi": 1, "Gi": 1024}
REPLICAS = re.compile(r"^Replicas:\s+(?P<desired>\d+) desired", re.MULTILINE)
# `Scaled down replica set X to 0 from 2` (kubectl ≥ 1.26) or `... from 2 to 0`: how many replicas there were.
SCALED_FROM = re.compile(r"Scaled down replica set \S+ (?:to 0 from (?P<a>\d+)|from (?P<b>\d+) to 0)")
_DURATION_PART = re.compile(r"(?P<n>\d+)(?P<unit>[dhms])")
_SECONDS = {"d": 86400, "h": 3600, "m": 60, "s": 1}
HEALTHY_STATUSES = ("Running", "Completed")


# What a client sent, as a program's access log repeats it: a request's query string, up to the status the program
# answered (`path=/x?q=... status=200`, `GET /x?q=... 200 3ms`, `"GET /x?q=... HTTP/1.1" 200`). Anyone who can reach
# the service writes it, so it is never evidence (an instruction in it included); the program's own words are.
REQUEST_QUERY = re.compile(r"(?P<path>/[^\s?\"]*)\?[^\n]*(?=\s+status=\d{3}\b|\s+HTTP/\d(?:\.\d)?\"|\s+\d{3}\s"
                           r"|\s+\d{3}$)", re.MULTILINE)  # greedy: to the line's last status, which the program wrote


def program_text(log: str) -> str:
    """A log with the query strings of the requests it records masked (`/x?…`): what the program itself says."""
    return REQUEST_QUERY.sub(lambda m: f"{m['path']}?…", log)


def object_name(label: str | None) -> str | None:
    """An alert's service label when it can name an object to read; None when it cannot (`Cart_Service`): a call
    built from it would be an invalid action, made again at every turn."""
    return label if label and len(label) <= 253 and re.match(NAME_PATTERN, label) else None


def deployment_of(pod: str) -> str:
    """`cart-7d9f8c6b5d-x2k4q` → `cart` (a Deployment's pods carry two generated suffixes)."""
    parts = pod.split("-")
    return "-".join(parts[:-2]) if len(parts) > 2 else pod


def age_seconds(age: str) -> float:
    """kubectl's AGE column (`2m3s`, `22h`, `7d1h`) in seconds; anything else (`<unknown>`) counts as old."""
    parts = _DURATION_PART.findall(age)
    return sum(int(n) * _SECONDS[unit] for n, unit in parts) if parts else float("inf")


def scaled_from(match: re.Match[str]) -> int:
    """The replica count a `SCALED_FROM` event took away."""
    return int(match["a"] or match["b"])


@dataclass(frozen=True)
class Pod:
    """One row of `list_pods`."""

    name: str
    ready: str
    status: str
    restarts: str  # `0`, or `3 (41s ago)`
    age: str

    @property
    def deployment(self) -> str:
        return deployment_of(self.name)

    @property
    def restart_count(self) -> int:
        return int(self.restarts.split()[0])

    @property
    def restarted_recently(self) -> bool:
        """Restarted minutes ago; a pod that restarted once yesterday and has run since is not a symptom."""
        return RECENT.search(self.restarts) is not None

    @property
    def unready(self) -> bool:
        ready, total = self.ready.split("/")
        return ready != total and self.status != "Completed"

    @property
    def sick(self) -> bool:
        return self.status not in HEALTHY_STATUSES or self.unready or self.restarted_recently


def pods(listing: str) -> list[Pod]:
    return [Pod(m["name"], m["ready"], m["status"], m["restarts"], m["age"]) for m in POD_ROW.finditer(listing)]
