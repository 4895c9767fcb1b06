"""What the apiserver does to an object before storing it: defaulting, then validation (422 `Invalid`).

Only the rules that matter for the resources the agent touches are modelled, but each one answers with the
apiserver's wording so a model trained here reads the same errors it would read on a real cluster.
"""

from __future__ import annotations

import base64
import binascii
import copy
import ipaddress
import re
import uuid
from typing import Any

from agent_sre.apps.manifests import STORAGE_CLASS
from agent_sre.kube.errors import ApiError
from agent_sre.kube.selectors import parse_label_selector, selector_to_string
from agent_sre.simulator.cluster import Cluster, Obj
from agent_sre.simulator.resources import BY_KEY

_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
SERVICE_CIDR = ipaddress.ip_network("10.96.0.0/12")
SERVICE_TYPES = ("ClusterIP", "NodePort", "LoadBalancer", "ExternalName")
STORAGE_CLASSES = frozenset({STORAGE_CLASS})  # the simulated cluster's, each with a dynamic provisioner


def _invalid(obj: Obj, resource: str, field: str, detail: str) -> ApiError:
    kind = BY_KEY[resource].kind
    name = obj.get("metadata", {}).get("name", "")
    return ApiError(422, "Invalid", f'{kind} "{name}" is invalid: {field}: {detail}')


# --- defaulting -------------------------------------------------------------------------------------------------

def _default_pod_spec(spec: dict[str, Any]) -> None:
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    for container in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
        if not isinstance(container, dict):
            continue
        image = str(container.get("image", ""))
        tag = image.rsplit("/", 1)[-1].partition(":")[2]
        container.setdefault("imagePullPolicy", "Always" if tag in ("", "latest") and "@" not in image
                             else "IfNotPresent")
        container.setdefault("terminationMessagePath", "/dev/termination-log")
        container.setdefault("terminationMessagePolicy", "File")
        for port in container.get("ports") or []:
            if isinstance(port, dict):
                port.setdefault("protocol", "TCP")


def _allocate_cluster_ip(cluster: Cluster) -> str:
    used = {(s.get("spec") or {}).get("clusterIP") for s in cluster.list("services")}
    for offset in range(10, SERVICE_CIDR.num_addresses - 1):
        ip = str(SERVICE_CIDR.network_address + offset)
        if ip not in used:
            return ip
    raise ApiError(500, "InternalError", "the service IP range 10.96.0.0/12 is exhausted")


JOB_UID_LABEL, JOB_NAME_LABEL = "batch.kubernetes.io/controller-uid", "batch.kubernetes.io/job-name"


def _default_job(obj: Obj, spec: dict[str, Any], old: Obj | None) -> None:
    """batch/v1 defaults, and on create the selector the apiserver generates (the job's own uid) with the labels
    it puts on the pod template (the job strategy's PrepareForCreate)."""
    parallelism = spec.setdefault("parallelism", 1)
    if spec.get("completions") is None and old is None:
        spec["completions"] = 1 if parallelism == 1 else None
    for key, value in (("backoffLimit", 6), ("completionMode", "NonIndexed"), ("suspend", False),
                       ("podReplacementPolicy", "TerminatingOrFailed"), ("manualSelector", False)):
        spec.setdefault(key, value)
    if spec.get("completions") is None:
        spec.pop("completions", None)
    meta = obj.setdefault("metadata", {})
    template = spec.setdefault("template", {})
    if old is None and not spec.get("selector"):
        uid = meta.setdefault("uid", str(uuid.uuid4()))
        spec["selector"] = {"matchLabels": {JOB_UID_LABEL: uid}}
        labels = (template.setdefault("metadata", {})).setdefault("labels", {})
        for key in (JOB_UID_LABEL, "controller-uid"):
            labels.setdefault(key, uid)
        for key in (JOB_NAME_LABEL, "job-name"):
            labels.setdefault(key, meta.get("name", ""))
    if isinstance(template.get("spec"), dict):
        _default_pod_spec(template["spec"])


def apply_defaults(cluster: Cluster, resource: str, obj: Obj, old: Obj | None = None) -> None:
    """Fill the fields the apiserver defaults, in place (idempotent, so it runs on every write).

    `old` is the stored version on an update: a service keeps its allocated cluster IP.
    """
    spec = obj.get("spec")
    if resource == "services" and old is not None and isinstance(spec, dict) and not spec.get("clusterIP"):
        for field in ("clusterIP", "clusterIPs"):
            if (old.get("spec") or {}).get(field):
                spec[field] = copy.deepcopy(old["spec"][field])
    if resource in ("deployments.apps", "replicasets.apps") and isinstance(spec, dict):
        spec.setdefault("replicas", 1)
        if resource == "deployments.apps":
            spec.setdefault("strategy", {"type": "RollingUpdate",
                                         "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"}})
            spec.setdefault("revisionHistoryLimit", 10)
            spec.setdefault("progressDeadlineSeconds", 600)
        template_spec = (spec.get("template") or {}).get("spec")
        if isinstance(template_spec, dict):
            _default_pod_spec(template_spec)
    elif resource == "pods" and isinstance(spec, dict):
        _default_pod_spec(spec)
    elif resource == "horizontalpodautoscalers.autoscaling" and isinstance(spec, dict):
        spec.setdefault("minReplicas", 1)  # autoscaling/v2 SetDefaults_HorizontalPodAutoscaler
        if not spec.get("metrics"):
            spec["metrics"] = [{"type": "Resource", "resource": {"name": "cpu", "target": {
                "type": "Utilization", "averageUtilization": 80}}}]
    elif resource == "jobs.batch" and isinstance(spec, dict):
        _default_job(obj, spec, old)
    elif resource == "cronjobs.batch" and isinstance(spec, dict):
        for key, value in (("concurrencyPolicy", "Allow"), ("suspend", False), ("successfulJobsHistoryLimit", 3),
                           ("failedJobsHistoryLimit", 1)):
            spec.setdefault(key, value)
        job_spec = (spec.get("jobTemplate") or {}).get("spec")
        if isinstance(job_spec, dict):
            for key, value in (("backoffLimit", 6), ("completionMode", "NonIndexed"), ("suspend", False)):
                job_spec.setdefault(key, value)
            template_spec = (job_spec.get("template") or {}).get("spec")
            if isinstance(template_spec, dict):
                _default_pod_spec(template_spec)
    elif resource == "services" and isinstance(spec, dict):
        spec.setdefault("type", "ClusterIP")
        spec.setdefault("sessionAffinity", "None")
        for port in spec.get("ports") or []:
            if isinstance(port, dict):
                port.setdefault("protocol", "TCP")
                if "port" in port:
                    port.setdefault("targetPort", port["port"])
        if spec["type"] != "ExternalName" and not spec.get("clusterIP"):
            spec["clusterIP"] = _allocate_cluster_ip(cluster)
        if spec.get("clusterIP"):
            spec.setdefault("clusterIPs", [spec["clusterIP"]])
    elif resource == "secrets":
        obj.setdefault("type", "Opaque")
        string_data = obj.pop("stringData", None) or {}
        if string_data:
            data = obj.setdefault("data", {})
            for key, value in string_data.items():
                data[key] = base64.b64encode(str(value).encode()).decode()
    elif resource == "namespaces":
        obj.setdefault("spec", {"finalizers": ["kubernetes"]})
        obj.setdefault("status", {"phase": "Active"})
    elif resource == "persistentvolumeclaims" and isinstance(spec, dict) and old is None:
        _provision(obj, spec)


def _provision(obj: Obj, spec: dict[str, Any]) -> None:
    """A new claim as the PV controller leaves it: one of a storage class the cluster has (the default when it names
    none) is bound at once to a volume its provisioner makes, `pvc-<uuid>` of the size asked for (Immediate binding,
    as kind's and most clouds' default class); one of a class the cluster lacks stays Pending."""
    spec.setdefault("storageClassName", STORAGE_CLASS)
    spec.setdefault("volumeMode", "Filesystem")
    if spec["storageClassName"] not in STORAGE_CLASSES or spec.get("volumeName"):
        obj["status"] = {"phase": "Pending"}
        return
    meta = obj.get("metadata") or {}
    where = f"{meta.get('namespace')}/{meta.get('name')}"
    spec["volumeName"] = f"pvc-{uuid.uuid5(uuid.NAMESPACE_URL, where)}"
    obj["status"] = {"phase": "Bound", "accessModes": list(spec.get("accessModes") or []),
                     "capacity": dict((spec.get("resources") or {}).get("requests") or {})}


# --- validation -------------------------------------------------------------------------------------------------

def _validate_name(obj: Obj, resource: str) -> None:
    meta = obj.get("metadata", {})
    # A generated name is the prefix plus random lowercase alphanumerics, so the prefix plus one is checked.
    name = meta.get("name") or (meta["generateName"] + "x" if meta.get("generateName") else "")
    if not name:
        raise _invalid(obj, resource, "metadata.name", "Required value: name or generateName is required")
    if resource == "namespaces":
        pattern, what = _DNS_LABEL, "a lowercase RFC 1123 label"
    elif resource == "services":
        pattern, what = _DNS_1035, "a DNS-1035 label"
    else:
        pattern, what = _DNS_SUBDOMAIN, "a lowercase RFC 1123 subdomain"
    limit = 63 if resource in ("namespaces", "services") else 253
    if not isinstance(name, str) or not pattern.match(name) or len(name) > limit:
        raise _invalid(obj, resource, "metadata.name", f'Invalid value: "{name}": must be {what} of at most '
                                                       f"{limit} characters")


def _validate_pod_spec(obj: Obj, resource: str, spec: Any, path: str) -> None:
    if not isinstance(spec, dict):
        raise _invalid(obj, resource, path, "Required value")
    containers = spec.get("containers")
    if not isinstance(containers, list) or not containers:
        raise _invalid(obj, resource, f"{path}.containers", "Required value")
    seen: set[str] = set()
    for group in ("initContainers", "containers"):
        for i, container in enumerate(spec.get(group) or []):
            where = f"{path}.{group}[{i}]"
            if not isinstance(container, dict):
                raise _invalid(obj, resource, where, "Invalid value: must be an object")
            name = container.get("name")
            if not isinstance(name, str) or not _DNS_LABEL.match(name):
                raise _invalid(obj, resource, f"{where}.name", f"Invalid value: {name!r}: must be a DNS label")
            if name in seen:
                raise _invalid(obj, resource, f"{where}.name", f'Duplicate value: "{name}"')
            seen.add(name)
            if not container.get("image"):
                raise _invalid(obj, resource, f"{where}.image", "Required value")


def _validate_workload(obj: Obj, resource: str) -> None:
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        raise _invalid(obj, resource, "spec", "Required value")
    replicas = spec.get("replicas", 1)
    if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 0:
        raise _invalid(obj, resource, "spec.replicas", f"Invalid value: {replicas!r}: must be greater than or "
                                                       "equal to 0")
    selector = spec.get("selector")
    if not isinstance(selector, dict) or not selector_to_string(selector):
        raise _invalid(obj, resource, "spec.selector", "Required value")
    template = spec.get("template") or {}
    labels = (template.get("metadata") or {}).get("labels") or {}
    if not parse_label_selector(selector_to_string(selector)).matches(labels):
        raise _invalid(obj, resource, "spec.template.metadata.labels",
                       f"Invalid value: {labels}: `selector` does not match template `labels`")
    _validate_pod_spec(obj, resource, template.get("spec"), "spec.template.spec")


def _validate_service(obj: Obj, resource: str) -> None:
    spec = obj.get("spec") or {}
    if spec.get("type", "ClusterIP") not in SERVICE_TYPES:
        raise _invalid(obj, resource, "spec.type", f'Unsupported value: "{spec.get("type")}": supported values: '
                                                   + ", ".join(f'"{t}"' for t in SERVICE_TYPES))
    for i, port in enumerate(spec.get("ports") or []):
        number = port.get("port") if isinstance(port, dict) else None
        if not isinstance(number, int) or not 0 < number < 65536:
            raise _invalid(obj, resource, f"spec.ports[{i}].port",
                           f"Invalid value: {number!r}: must be between 1 and 65535, inclusive")
    if spec.get("selector") is not None and not isinstance(spec["selector"], dict):
        raise _invalid(obj, resource, "spec.selector", "Invalid value: must be a map of labels")


def _validate_secret(obj: Obj, resource: str) -> None:
    for key, value in (obj.get("data") or {}).items():
        try:
            base64.b64decode(str(value), validate=True)
        except (binascii.Error, ValueError):
            raise ApiError(400, "BadRequest", f'Secret in version "v1" cannot be handled as a Secret: illegal '
                                              f'base64 data in data["{key}"]') from None


def _validate_labels(obj: Obj, resource: str) -> None:
    meta = obj.get("metadata", {})
    for field in ("labels", "annotations"):
        values = meta.get(field)
        if values is None:
            continue
        if not isinstance(values, dict) or not all(isinstance(v, str) for v in values.values()):
            raise _invalid(obj, resource, f"metadata.{field}", "Invalid value: values must be strings")


def _validate_hpa(obj: Obj, resource: str) -> None:
    spec = obj.get("spec") or {}
    low, high = spec.get("minReplicas", 1), spec.get("maxReplicas")
    if not isinstance(spec.get("scaleTargetRef"), dict) or not spec["scaleTargetRef"].get("name"):
        raise _invalid(obj, resource, "spec.scaleTargetRef.name", "Required value")
    if not isinstance(high, int) or isinstance(high, bool) or high < 1:
        raise _invalid(obj, resource, "spec.maxReplicas", f"Invalid value: {high!r}: must be greater than or "
                                                          "equal to 1")
    if not isinstance(low, int) or isinstance(low, bool) or low < 1:
        raise _invalid(obj, resource, "spec.minReplicas", f"Invalid value: {low!r}: must be greater than or "
                                                          "equal to 1")
    if low > high:
        raise _invalid(obj, resource, "spec.minReplicas", f"Invalid value: {low}: must be less than or equal to "
                                                          "maxReplicas")


def _validate_job(obj: Obj, resource: str) -> None:
    spec = obj.get("spec") or {}
    template = spec.get("template") or {}
    _validate_pod_spec(obj, resource, template.get("spec"), "spec.template.spec")
    policy = (template.get("spec") or {}).get("restartPolicy")
    if policy not in ("OnFailure", "Never"):
        raise _invalid(obj, resource, "spec.template.spec.restartPolicy",
                       f'Unsupported value: "{policy}": supported values: "OnFailure", "Never"')
    for key in ("parallelism", "completions", "backoffLimit"):
        value = spec.get(key, 0)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
            raise _invalid(obj, resource, f"spec.{key}", f"Invalid value: {value!r}: must be greater than or "
                                                         "equal to 0")


def validate(resource: str, obj: Obj) -> None:
    """Raise ApiError 422 (or 400 for undecodable data) when the apiserver would refuse `obj`."""
    _validate_name(obj, resource)
    _validate_labels(obj, resource)
    if resource == "pods":
        _validate_pod_spec(obj, resource, obj.get("spec"), "spec")
    elif resource in ("deployments.apps", "replicasets.apps"):
        _validate_workload(obj, resource)
    elif resource == "services":
        _validate_service(obj, resource)
    elif resource == "secrets":
        _validate_secret(obj, resource)
    elif resource == "horizontalpodautoscalers.autoscaling":
        _validate_hpa(obj, resource)
    elif resource == "jobs.batch":
        _validate_job(obj, resource)


def _without_images(spec: Any) -> Any:
    spec = copy.deepcopy(spec) if isinstance(spec, dict) else {}
    for group in ("initContainers", "containers"):
        for container in spec.get(group) or []:
            if isinstance(container, dict):
                container.pop("image", None)
    return spec


def validate_update(resource: str, new: Obj, old: Obj) -> None:
    """The apiserver's immutability rules for the fields an agent might try to change in place."""
    new_spec, old_spec = new.get("spec") or {}, old.get("spec") or {}
    if resource in ("deployments.apps", "replicasets.apps") and new_spec.get("selector") != old_spec.get("selector"):
        raise _invalid(new, resource, "spec.selector",
                       f"Invalid value: {new_spec.get('selector')}: field is immutable")
    if resource == "services" and old_spec.get("clusterIP") and new_spec.get("clusterIP") != old_spec["clusterIP"]:
        raise _invalid(new, resource, "spec.clusterIP", f"Invalid value: {new_spec.get('clusterIP')!r}: "
                                                        "field is immutable")
    if resource == "pods" and _without_images(new_spec) != _without_images(old_spec):
        raise _invalid(new, resource, "spec", "Forbidden: pod updates may not change fields other than "
                                              "`spec.containers[*].image`, `spec.initContainers[*].image`, "
                                              "`spec.activeDeadlineSeconds`, `spec.tolerations` (only additions to "
                                              "existing tolerations), `spec.terminationGracePeriodSeconds` "
                                              "(allow it to be set to 1 if it was previously negative)")
