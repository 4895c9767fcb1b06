"""The tools' `WriteGuard`: what every write the tools send must pass in the request layer (`kube.Kube`).

First the request itself (`guardrails.check_write`, after the tool's own checks), then its effect: the rules
(`write_rules`) judge the object before and after the server's dry run of the same request, given what they must
know of the namespace. So no tool - and no code holding the tools' client - can write outside the rules.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agent_sre.apps.images import DOCKER_CONFIG_JSON
from agent_sre.kube.client import Kube, Obj
from agent_sre.tools import guardrails, write_rules
from agent_sre.tools.write_rules import Surroundings, WriteRules


@dataclass(frozen=True)
class Guard:
    """The rules for one incident's writes; high-risk writes go ahead only when `approved` (by a human, or by the
    incident's limits)."""

    approved: bool = False
    rules: WriteRules = field(default_factory=WriteRules)

    def check(self, verb: str, kind: str, name: str, namespace: str, body: Any) -> None:
        guardrails.check_write(verb, kind, name, namespace, body)

    def judge(self, kube: Kube, kind: str, before: Obj, after: Obj | None) -> None:
        """Raise `Refusal` for a write the rules forbid, `NeedsApproval` for a high-risk one not yet approved."""
        findings = write_rules.judge(kind, before, after, _surroundings(kube, kind, before, after), self.rules)
        guardrails.enforce(findings, self.approved)


def _surroundings(kube: Kube, kind: str, before: Obj, after: Obj | None) -> Surroundings:
    """What the rules must know of the namespace: for a new pod template, the images, services, revisions and pull
    secrets it may use; for a service, the ports of the pods it selects. Nothing is read for other writes. The lists
    are only read (`shared`: in-process, the simulator's own objects, not copies)."""
    namespace = kube.namespace
    template = (after or {}).get("spec", {}).get("template")
    if kind == "service" and after is not None:
        selector = (after.get("spec") or {}).get("selector") or {}
        ports = {port[key] for spec in _pod_specs(kube.list("deployment", shared=True), selector)
                 for container in write_rules.containers(spec).values() for port in container.get("ports") or []
                 for key in ("containerPort", "name") if key in port}
        return Surroundings(namespace=namespace, container_ports=frozenset(ports))
    if kind != "deployment" or template is None or template == before.get("spec", {}).get("template"):
        return Surroundings(namespace=namespace)
    replicasets = kube.list("replicaset", shared=True)
    uid = before["metadata"].get("uid")
    revisions = tuple(rs["spec"]["template"] for rs in replicasets
                      if any(o.get("uid") == uid for o in rs["metadata"].get("ownerReferences") or []))
    images = {container["image"] for spec in _pod_specs([*kube.list("deployment", shared=True), *replicasets])
              for container in write_rules.containers(spec).values() if container.get("image")}
    return Surroundings(namespace=namespace, image_sources=frozenset(map(write_rules.image_source, images)),
                        services=frozenset(s["metadata"]["name"] for s in kube.list("service", shared=True)),
                        revisions=revisions, pull_secrets=frozenset(
                            s["metadata"]["name"] for s in kube.list("secret", shared=True)
                            if s.get("type") == DOCKER_CONFIG_JSON))


def _pod_specs(owners: list[Obj], selector: dict[str, str] | None = None) -> list[Obj]:
    """The pod specs of deployments' or replica sets' templates, only those whose labels `selector` matches when one
    is given (an empty selector matches none)."""
    templates = [(o.get("spec") or {}).get("template") or {} for o in owners]
    return [t.get("spec") or {} for t in templates if selector is None or selector and
            selector.items() <= ((t.get("metadata") or {}).get("labels") or {}).items()]
