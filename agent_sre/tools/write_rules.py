"""Rules over what a write does: the object before it and after it, whatever tool or patch produced the change.

`guardrails` judges a call's arguments and a patch's paths; these rules judge the write's effect, on the object the
API server's dry run returns (`Kube.patch`), so a generic `patch` and a purpose-built tool answer to the same rules.
Each finding names its rule, says in a sentence what the write would do, and has a risk: `forbidden` (never done),
`high` (done once a human approves it), `low` (done). A change no rule recognises is low. The table of rules, with
why, is in docs/safety.md ("Guardrails on the write").
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from kubernetes.utils import parse_quantity

from agent_sre.models.tools import WriteFinding, WriteRisk

Obj = dict[str, Any]
Finding = WriteFinding

RESTART_ANNOTATION = "kubectl.kubernetes.io/restartedAt"
TEMPLATE_HASH_LABEL = "pod-template-hash"
CHAOS_KINDS = frozenset({"PodChaos", "StressChaos", "NetworkChaos", "HTTPChaos", "DNSChaos", "IOChaos", "Schedule"})
DEFAULT_MAX_REPLICAS = 20
_HOST_PORT = re.compile(r"^([A-Za-z0-9.-]+):[0-9]{1,5}$")
_DOTTED_NAME = re.compile(r"^(?=.*[A-Za-z][A-Za-z0-9-]*\.?$)[A-Za-z0-9-]+(\.[A-Za-z0-9-]+)+\.?$")  # `name.` too
# Env vars whose value is where the container connects: any new value must be one of the namespace's services,
# however it is spelled (a decimal IPv4 such as 3405803783 is a host to most resolvers, and to no pattern).
_HOST_VARIABLE = re.compile(r"HOST|ADDR|URL|URI|ENDPOINT|SERVER|DSN|BROKER", re.IGNORECASE)
_PROBES = ("livenessProbe", "readinessProbe", "startupProbe")


@dataclass(frozen=True)
class WriteRules:
    """The rules' settings for one deployment of the agent (AGENT_SRE_ALLOWED_IMAGE_SOURCES, ..._MAX_REPLICAS)."""

    allowed_image_sources: tuple[str, ...] = ()  # empty: those already used in the namespace (see `Surroundings`)
    max_replicas: int = DEFAULT_MAX_REPLICAS


@dataclass(frozen=True)
class Surroundings:
    """What the namespace says about a write, read by `Kube` before it judges one."""

    namespace: str = ""
    image_sources: frozenset[str] = frozenset()  # of every image in the namespace's deployments and replica sets
    services: frozenset[str] = frozenset()  # an env var may point at these hosts
    revisions: tuple[Obj, ...] = ()  # the written deployment's pod templates in its revision history
    container_ports: frozenset[int | str] = frozenset()  # of the pods a written service selects, numbers and names
    pull_secrets: frozenset[str] = frozenset()  # the namespace's secrets that hold registry credentials


def judge(kind: str, before: Obj, after: Obj | None, where: Surroundings | None = None,
          rules: WriteRules | None = None) -> list[Finding]:
    """What writing `after` over `before` (None: deleting it) does, rule by rule."""
    where, rules = where or Surroundings(), rules or WriteRules()
    if after is None:
        return [_deletion(kind, before)]
    if kind == "deployment":
        return _deployment(before, after, where, rules)
    if kind == "service":
        return _service(before, after, where)
    if kind == "horizontalpodautoscaler":
        return _autoscaler(before, after, rules.max_replicas)
    plain = {"secret": _secret, "configmap": _configmap, "resourcequota": _quota, "networkpolicy": _network_policy}
    return plain[kind](before, after) if kind in plain else []  # a node may only be uncordoned (guardrails)


def _finding(rule: str, risk: WriteRisk, reason: str) -> Finding:
    return Finding(rule=rule, risk=risk, reason=reason)


def _spec(obj: Obj | None) -> Obj:
    return (obj or {}).get("spec") or {}


# --- deletes ---------------------------------------------------------------------------------------------------
def _deletion(kind: str, before: Obj) -> Finding:
    name = before.get("metadata", {}).get("name")
    if kind == "pod":
        return _finding("delete_pod", "low", f"pod {name} is deleted; its controller recreates it")
    if kind in CHAOS_KINDS:
        return _finding("delete_chaos", "low", f"{kind} {name} is deleted, which ends the fault it injects")
    if kind == "networkpolicy":
        return _finding("networkpolicy_deleted", "high", f"deleting network policy {name} opens the pods it "
                                                         f"protects to traffic it kept out")
    return _finding("delete", "high", f"deleting {kind} {name} cannot be undone by the agent")


# --- deployments -----------------------------------------------------------------------------------------------
def _deployment(before: Obj, after: Obj, where: Surroundings, rules: WriteRules) -> list[Finding]:
    findings = _replicas(_spec(before).get("replicas", 1), _spec(after).get("replicas", 1), rules.max_replicas)
    old, new = _spec(before).get("template") or {}, _spec(after).get("template") or {}
    if old == new:
        return findings
    template = _template(old, new, where, rules)
    if any(_same_template(new, revision) for revision in where.revisions):
        template = [f for f in template if f.risk == "forbidden"] + [_finding(
            "rollback", "low", "the pod template goes back to one of the deployment's earlier revisions")]
    return findings + template


def _replicas(old: int, new: int, most: int) -> list[Finding]:
    if old == new:
        return []
    bound = min(max(2 * old, 2), most)
    if new == 0:
        return [_finding("replicas", "forbidden", "scaling to 0 replicas takes the service down")]
    if new > bound:
        return [_finding("replicas", "high", f"{old} -> {new} replicas is more than twice the current count (at "
                                             f"least 2) or more than {most}: it may exhaust the cluster or a quota")]
    return [_finding("replicas", "low", f"{old} -> {new} replicas, within bounds")]


def _same_template(template: Obj, revision: Obj) -> bool:
    """A revision's template carries the hash label its controller adds; the deployment's never does."""
    labels = {k: v for k, v in ((revision.get("metadata") or {}).get("labels") or {}).items()
              if k != TEMPLATE_HASH_LABEL}
    return template == {**revision, "metadata": {**(revision.get("metadata") or {}), "labels": labels}}


def _template(old: Obj, new: Obj, where: Surroundings, rules: WriteRules) -> list[Finding]:
    old_spec, new_spec = old.get("spec") or {}, new.get("spec") or {}
    findings = [*_security(old_spec, new_spec), *_identity(old_spec, new_spec), *_placement(old_spec, new_spec),
                *_claims(old_spec, new_spec), *_pull_secrets(old_spec, new_spec, where)]
    old_containers, new_containers = containers(old_spec), containers(new_spec)
    for name in sorted(set(old_containers) ^ set(new_containers)):
        change = "added" if name in new_containers else "removed"
        findings.append(_finding("containers", "high", f"container {name} is {change}"))
    allowed = rules.allowed_image_sources or tuple(sorted(where.image_sources))
    for name, container in new_containers.items():
        before = old_containers.get(name, {})
        findings += _image(name, before.get("image"), container.get("image"), allowed)
        findings += _command(name, before, container)
        findings += _env(name, before, container, where)
        findings += _limits(name, before, container)
    old_restart = ((old.get("metadata") or {}).get("annotations") or {}).get(RESTART_ANNOTATION)
    new_restart = ((new.get("metadata") or {}).get("annotations") or {}).get(RESTART_ANNOTATION)
    if new_restart != old_restart:
        findings.append(_finding("restart", "low", "the pods are replaced by a rolling restart"))
    return findings


def containers(pod_spec: Obj) -> dict[str, Obj]:
    """A pod spec's init and app containers by name."""
    return {str(c.get("name")): c for f in ("initContainers", "containers") for c in pod_spec.get(f) or []}


def image_source(image: str) -> str:
    """Where an image comes from: its registry and its repository path without the image's own name, so a tag
    change stays within it (`shop/cart:1.4` -> `docker.io/shop`, `redis:7` -> `docker.io/library`,
    `ghcr.io/acme/web@sha256:..` -> `ghcr.io/acme`)."""
    parts = image.split("@", 1)[0].split("/")
    parts[-1] = parts[-1].split(":", 1)[0]
    if len(parts) == 1 or not ("." in parts[0] or ":" in parts[0] or parts[0] == "localhost"):
        parts = ["docker.io", *(parts if len(parts) > 1 else ["library", *parts])]
    return "/".join(parts[:-1])


def _image(container: str, old: str | None, new: str | None, allowed: tuple[str, ...]) -> list[Finding]:
    if new is None or new == old:
        return []
    source = image_source(new)
    if not any(source == a or source.startswith(a + "/") for a in allowed):
        return [_finding("image_source", "forbidden", f"image {new} of container {container} comes from {source}, "
                                                      f"not an allowed source ({', '.join(allowed) or 'none'})")]
    return [_finding("image_source", "low", f"image {new} of container {container} comes from {source}, "
                                            f"an allowed source")]


def _command(container: str, old: Obj, new: Obj) -> list[Finding]:
    """A change to what the container runs: its command and args, and the commands of its lifecycle hooks and exec
    probes, which run in it just the same (a probe's HTTP path or timing is no command)."""
    changed = [f for f in ("command", "args") if old.get(f) != new.get(f)] if old else []
    changed += [f for f in ("lifecycle", *_PROBES) if _executed(old.get(f)) != _executed(new.get(f))]
    if not changed:
        return []
    return [_finding("command", "high", f"the {' and '.join(changed)} of container {container} change: the "
                                        f"container would run something other than its image's program")]


def _executed(field: Any) -> list[Any]:
    """Every `exec.command` under a probe or a lifecycle hook."""
    if not isinstance(field, dict):
        return []
    found = [field["exec"].get("command")] if isinstance(field.get("exec"), dict) else []
    return found + [c for value in field.values() if isinstance(value, dict) for c in _executed(value)]


def _env(container: str, old: Obj, new: Obj, where: Surroundings) -> list[Finding]:
    findings = []
    if old.get("envFrom") != new.get("envFrom"):
        findings.append(_finding("env_secret", "high", f"container {container} imports other Secrets or "
                                                       f"ConfigMaps as its environment"))
    before = {e.get("name"): e for e in old.get("env") or []}
    after = {e.get("name"): e for e in new.get("env") or []}
    for name in sorted(set(before) | set(after), key=str):
        was, now = before.get(name), after.get(name)
        if was == now:
            continue
        if _secret_ref(was) or _secret_ref(now):
            findings.append(_finding("env_secret", "high", f"env {name} of container {container} "
                                                           f"references a Secret, and the reference changes"))
            continue
        value = (now or {}).get("value")
        host = _host(value) or (str(value).lower() if value and _HOST_VARIABLE.search(str(name)) else None)
        if host is not None and host != _host((was or {}).get("value")) and not _in_namespace(host, where):
            findings.append(_finding("env_host", "high", f"env {name} of container {container} would point at "
                                                         f"{host}, a host outside the namespace's services"))
        else:
            findings.append(_finding("env", "low", f"env {name} of container {container} changes"))
    return findings


def _secret_ref(env: Obj | None) -> bool:
    return bool(((env or {}).get("valueFrom") or {}).get("secretKeyRef"))


def _host(value: Any) -> str | None:
    """The host a value names: a URL's, a `host:port`'s, an IP address or a dotted host name; else None."""
    if not isinstance(value, str) or not value:
        return None
    if "://" in value:  # the innermost URL's (`jdbc:postgresql://host:5432/db`)
        return urlsplit("x://" + value.rsplit("://", 1)[1]).hostname
    if value.startswith("["):  # `[2001:db8::7]`, `[::1]:5432`
        return urlsplit("x://" + value).hostname
    found = _HOST_PORT.match(value)
    if found:
        return found[1].lower()
    try:
        return str(ipaddress.ip_address(value))
    except ValueError:
        return value.lower() if _DOTTED_NAME.match(value) else None


def _in_namespace(host: str, where: Surroundings) -> bool:
    name, _, rest = host.partition(".")
    suffixes = ("", where.namespace, f"{where.namespace}.svc", f"{where.namespace}.svc.cluster.local")
    return name in where.services and rest in suffixes


def _limits(container: str, old: Obj, new: Obj) -> list[Finding]:
    before = (old.get("resources") or {}).get("limits") or {}
    after = (new.get("resources") or {}).get("limits") or {}
    findings = []
    for resource in sorted(set(before) | set(after)):
        was, now = before.get(resource), after.get(resource)
        if was == now:
            continue
        if now is not None and (was is None or parse_quantity(now) < parse_quantity(was)):
            findings.append(_finding("limits", "high", f"the {resource} limit of container {container} goes "
                                                       f"{was or 'unlimited'} -> {now}: its pods may be "
                                                       f"throttled or OOM-killed"))
        else:
            findings.append(_finding("limits", "low", f"the {resource} limit of container {container} goes "
                                                      f"{was} -> {now or 'unlimited'}"))
    return findings


def _security(old: Obj, new: Obj) -> list[Finding]:
    gained = [p for p in _privileges(new) if p not in set(_privileges(old))]
    return [_finding("pod_security", "forbidden", f"the pods would gain {p}: a way out of the container onto "
                                                  f"the node") for p in gained]


def _privileges(pod_spec: Obj) -> Iterator[str]:
    for host in ("hostNetwork", "hostPID", "hostIPC"):
        if pod_spec.get(host):
            yield host
    for volume in pod_spec.get("volumes") or []:
        if "hostPath" in volume:
            yield f"hostPath volume {volume.get('name')} ({(volume['hostPath'] or {}).get('path')})"
    if (pod_spec.get("securityContext") or {}).get("runAsUser") == 0:
        yield "runAsUser 0 (root)"
    for name, container in containers(pod_spec).items():
        context = container.get("securityContext") or {}
        if context.get("privileged"):
            yield f"a privileged container {name}"
        if context.get("allowPrivilegeEscalation"):
            yield f"allowPrivilegeEscalation in container {name}"
        if context.get("runAsUser") == 0:
            yield f"runAsUser 0 (root) in container {name}"
        for capability in (context.get("capabilities") or {}).get("add") or []:
            yield f"capability {capability} in container {name}"
        for port in container.get("ports") or []:
            if port.get("hostPort"):
                yield f"hostPort {port['hostPort']} in container {name}"


def _identity(old: Obj, new: Obj) -> list[Finding]:
    fields = ("serviceAccountName", "serviceAccount", "automountServiceAccountToken")
    return [_finding("service_account", "forbidden", f"{f} changes {old.get(f)} -> {new.get(f)}: the pods would "
                                                     f"act with another identity's API permissions")
            for f in fields if old.get(f) != new.get(f)]


def _placement(old: Obj, new: Obj) -> list[Finding]:
    changed = [f for f in ("nodeSelector", "affinity", "tolerations", "nodeName", "topologySpreadConstraints")
               if old.get(f) != new.get(f)]
    if not changed:
        return []
    return [_finding("placement", "high", f"{', '.join(changed)} change: the pods may land on nodes without the "
                                          f"hardware, disks or isolation they were pinned to")]


def _claims(old: Obj, new: Obj) -> list[Finding]:
    """A volume that mounted a PersistentVolumeClaim: taking the claim away (another source, an emptyDir, no volume,
    or a second source beside it, which an API server refuses and a lenient one may not) starts the pods without the
    data it holds; naming another claim mounts other data (back to an earlier revision's
    claim is a rollback, judged as one)."""
    now = {v.get("name"): v for v in new.get("volumes") or []}
    findings = []
    for volume in old.get("volumes") or []:
        claim = (volume.get("persistentVolumeClaim") or {}).get("claimName")
        if not claim:
            continue
        name = volume.get("name")
        other = (now.get(name, {}).get("persistentVolumeClaim") or {}).get("claimName")
        if not other or set(now[name]) != {"name", "persistentVolumeClaim"}:  # a second source, an emptyDir too
            findings.append(_finding("data_volume", "forbidden", f"volume {name} no longer mounts claim {claim}: the "
                                                                 f"pods would start without the data it holds"))
        elif other != claim:
            findings.append(_finding("data_volume", "high", f"volume {name} mounts claim {other} instead of {claim}: "
                                                            f"the pods would read and write other data"))
    return findings


def _pull_secrets(old: Obj, new: Obj, where: Surroundings) -> list[Finding]:
    """A pod may pull with a secret the namespace holds as registry credentials (`kubernetes.io/dockerconfigjson`):
    naming any other secret (missing, or one of another type) hands the kubelet nothing valid, or another secret's
    data to send a registry; dropping one of those credentials stops the next pods pulling (held for a human)."""
    before = {r.get("name") for r in old.get("imagePullSecrets") or []}
    after = {r.get("name") for r in new.get("imagePullSecrets") or []}
    findings = [_finding("image_pull_secret", "forbidden", f"image pull secret {name} is not a registry credential "
                                                           f"of the namespace (type kubernetes.io/dockerconfigjson)")
                for name in sorted(after - before, key=str) if name not in where.pull_secrets]
    findings += [_finding("image_pull_secret", "high", f"image pull secret {name} removed: new pods would pull "
                                                       f"without the registry's credentials (401, ImagePullBackOff)")
                 for name in sorted(before - after, key=str) if name in where.pull_secrets]
    return findings


# --- services --------------------------------------------------------------------------------------------------
def _service(before: Obj, after: Obj, where: Surroundings) -> list[Finding]:
    old, new = _spec(before), _spec(after)
    findings = []
    if old.get("selector") != new.get("selector"):
        findings.append(_finding("service_selector", "high", f"the service's selector goes {old.get('selector')} "
                                                             f"-> {new.get('selector')}: its traffic goes elsewhere"))
    exposed = [f"type {new.get('type')}"] if new.get("type") in ("LoadBalancer", "NodePort") and \
        old.get("type") != new.get("type") else []
    exposed += [f"{f} {new.get(f)}" for f in ("externalIPs", "externalName", "loadBalancerSourceRanges")
                if new.get(f) and new.get(f) != old.get(f)]
    findings += [_finding("service_exposure", "forbidden", f"the service would get {what}: exposed outside the "
                                                           f"cluster or sent to an outside address")
                 for what in exposed]
    return findings + _ports(old.get("ports") or [], new.get("ports") or [], where)


def _ports(old: list[Obj], new: list[Obj], where: Surroundings) -> list[Finding]:
    if len(old) != len(new):
        return [_finding("service_ports", "high", f"the service's ports go from {len(old)} to {len(new)}")]
    findings = []
    for was, now in zip(old, new, strict=True):
        if was.get("port") != now.get("port"):
            findings.append(_finding("service_port", "high", f"the service's port {was.get('port')} -> "
                                                             f"{now.get('port')}: its clients still call the old one"))
        target = now.get("targetPort", now.get("port"))
        if was.get("targetPort", was.get("port")) == target:
            continue
        if target in where.container_ports:
            findings.append(_finding("service_target_port", "low", f"targetPort -> {target}, a port the selected "
                                                                   f"pods' containers declare"))
        else:
            findings.append(_finding("service_target_port", "high", f"targetPort -> {target}, which no selected "
                                                                    f"pod's container declares"))
    return findings


# --- config, secrets, quotas, policies -------------------------------------------------------------------------
def _data(obj: Obj) -> Obj:
    return {**(obj.get("data") or {}), **(obj.get("binaryData") or {})}


def _secret(before: Obj, after: Obj) -> list[Finding]:
    old, new = _data(before), _data(after)
    name = before.get("metadata", {}).get("name")
    if old and not new:
        return [_finding("secret_wiped", "forbidden", f"every key of secret {name} would be removed")]
    changed = sorted(k for k in old if new.get(k) != old[k])
    findings = [_finding("secret_data", "high", f"key {key} of secret {name} is "
                                                f"{'changed' if key in new else 'removed'}: whatever uses it must be "
                                                f"given the new value, or breaks") for key in changed]
    if before.get("type") != after.get("type"):
        findings.append(_finding("secret_data", "high", f"secret {name} changes type"))
    return findings + [_finding("secret_key_added", "low", f"key {key} is added to secret {name}")
                       for key in sorted(set(new) - set(old))]


def _configmap(before: Obj, after: Obj) -> list[Finding]:
    old, new = _data(before), _data(after)
    name = before.get("metadata", {}).get("name")
    return [_finding("config_key_removed", "high", f"key {key} of configmap {name} is removed: a program that reads "
                                                   f"it may not start") for key in sorted(set(old) - set(new))] + \
        [_finding("config_value", "low", f"key {key} of configmap {name} is set") for key in sorted(new)
         if old.get(key) != new[key]]


def _quota(before: Obj, after: Obj) -> list[Finding]:
    old, new = _spec(before).get("hard") or {}, _spec(after).get("hard") or {}
    findings = [_finding("quota", "forbidden", f"quota limit {key} would be removed") for key in sorted(old)
                if key not in new]
    for key in sorted(new):
        if key in old and parse_quantity(new[key]) < parse_quantity(old[key]):
            findings.append(_finding("quota", "forbidden", f"quota limit {key} would be lowered "
                                                           f"{old[key]} -> {new[key]}: quotas are only raised"))
        elif old.get(key) != new[key]:
            findings.append(_finding("quota", "low", f"quota limit {key} goes {old.get(key, 'unset')} -> {new[key]}"))
    if any(_spec(before).get(f) != _spec(after).get(f) for f in ("scopes", "scopeSelector")):
        findings.append(_finding("quota", "high", "the quota's scopes change: it would count other pods"))
    return findings


def _autoscaler(before: Obj, after: Obj, most: int) -> list[Finding]:
    """An autoscaler's bounds may move within the deployment's replica bound (`max_replicas`, as for `scale`);
    lowering one, or changing what it scales or on what, is a human's call."""
    old, new = _spec(before), _spec(after)
    name = before.get("metadata", {}).get("name")
    if old.get("scaleTargetRef") != new.get("scaleTargetRef"):
        return [_finding("autoscaler_target", "forbidden", f"autoscaler {name} would scale another workload")]
    findings = [_finding("autoscaler_policy", "high", f"the {field} of autoscaler {name} change: it would scale on "
                                                      f"other signals or at another pace")
                for field in ("metrics", "behavior") if old.get(field) != new.get(field)]
    for field, default in (("minReplicas", 1), ("maxReplicas", None)):
        was, now = old.get(field, default), new.get(field, default)
        if was == now:
            continue
        if now is None or was is not None and now < was:
            findings.append(_finding("autoscaler_bounds", "high", f"{field} of autoscaler {name} goes {was} -> "
                                                                  f"{now}: fewer pods may serve the load"))
        elif now > most:
            findings.append(_finding("autoscaler_bounds", "high", f"{field} of autoscaler {name} goes {was} -> "
                                                                  f"{now}, more than {most}: it may exhaust the "
                                                                  f"cluster or a quota"))
        else:
            findings.append(_finding("autoscaler_bounds", "low", f"{field} of autoscaler {name} goes {was} -> "
                                                                 f"{now}, within bounds"))
    return findings


def _network_policy(before: Obj, after: Obj) -> list[Finding]:
    old, new = _spec(before), _spec(after)
    if old == new:
        return []
    tightened = (old.get("podSelector") == new.get("podSelector")
                 and set(new.get("policyTypes") or []) >= set(old.get("policyTypes") or [])
                 and all(rule in (old.get(d) or []) for d in ("ingress", "egress") for rule in new.get(d) or []))
    if tightened:
        return [_finding("networkpolicy", "low", "the network policy only drops rules: it lets in less")]
    return [_finding("networkpolicy", "high", "the network policy's selector, types or rules change: it may let "
                                              "in traffic it kept out")]
