"""Faults in configuration the pods read at start-up: a rotated secret, a corrupted config map key.

Both are time bombs, as on a real cluster: running pods keep the values they started with, so the injection
also restarts the target, as a reloader does after a config change; other consumers of the same key break only
when they restart. The restart is a rollout: where the strategy keeps old pods, they serve on with the values they
read at start-up and the rollout is stuck on crash-looping new pods (see `RolloutFault`).
"""

from __future__ import annotations

import base64
import hashlib
from typing import Any

from pydantic import Field

from agent_sre.apps.catalog import PULL_SECRET, AppSpec, Ref, ServiceSpec, run_context
from agent_sre.apps.images import ACME, DOCKER_CONFIG_KEY, docker_config
from agent_sre.apps.manifests import pull_secret
from agent_sre.apps.software import check_value
from agent_sre.faults.base import FaultContext, FaultError, FaultParams, RolloutFault, restart_cause
from agent_sre.kube.client import Kube
from agent_sre.models.scenario import ExpectedEnding
from agent_sre.models.tools import NAME_PATTERN, ToolCall


def _restart(ctx: FaultContext) -> ToolCall:
    return ToolCall(tool="rollout_restart", args={"deployment": ctx.target})


def _undo(ctx: FaultContext) -> list[ToolCall]:
    """Plausible but wrong for configuration faults: the previous revision reads the same broken key."""
    return [ToolCall(tool="rollout_undo", args={"deployment": ctx.target})]


class SecretParams(FaultParams):
    value: str = Field(min_length=1, max_length=256)


def _password_ref(svc: ServiceSpec) -> Ref | None:
    ref = svc.refs().get("DB_PASSWORD")
    return ref if ref is not None and ref.kind == "secret" else None


class SecretPassword(RolloutFault):
    name = "secret_password"
    summary = "rotate the app's database password secret without the database (password authentication failed)"
    fault_class = "config/secret"
    modelled_on = "AIOpsLab revoke_auth / auth_miss_mongodb, ITBench corrupted secret"
    Params = SecretParams
    crashes = True

    def targets(self, app: AppSpec) -> list[str]:
        return [s.name for s in app.services if _password_ref(s) is not None]

    def defaults(self, app: AppSpec, target: str) -> dict[str, Any]:
        digest = hashlib.blake2b(f"{app.name}/{target}/rotated".encode(), digest_size=15).digest()
        return {"value": digest.hex()[:20]}

    def ref(self, ctx: FaultContext) -> Ref:
        ref = _password_ref(ctx.svc)
        assert ref is not None
        return ref

    def database(self, ctx: FaultContext) -> str:
        return ctx.svc.literal_env().get("DB_HOST", "")

    def password(self, ctx: FaultContext) -> str:
        return ctx.app.password(ctx.seed, self.database(ctx))

    def validate(self, ctx: FaultContext) -> None:
        if ctx.params.value == self.password(ctx):
            raise FaultError("that is the database's actual password; it would not break anything")

    def _inject(self, k8s: Kube, ctx: FaultContext) -> None:
        ref = self.ref(ctx)
        k8s.set_secret_key(ctx.namespace, ref.name, ref.key, ctx.params.value)
        k8s.rollout_restart(ctx.namespace, ctx.target)

    def _clear(self, k8s: Kube, ctx: FaultContext) -> None:
        ref = self.ref(ctx)
        k8s.set_secret_key(ctx.namespace, ref.name, ref.key, self.password(ctx))
        k8s.rollout_restart(ctx.namespace, ctx.target)

    def root_cause(self, ctx: FaultContext) -> str:
        return f"secret/{self.ref(ctx).name}"

    def fix(self, ctx: FaultContext) -> list[ToolCall]:
        ref = self.ref(ctx)
        return [ToolCall(tool="set_config_key", args={"kind": "secret", "name": ref.name, "key": ref.key,
                                                      "value": self.password(ctx)}), _restart(ctx)]

    def wrong_fix(self, ctx: FaultContext) -> list[ToolCall]:
        return _undo(ctx)

    def check(self, k8s: Kube, ctx: FaultContext, baseline: Any) -> list[str]:
        ref = self.ref(ctx)
        db_secret, db_key = ctx.app.databases[self.database(ctx)]
        ours = k8s.secret_value(ctx.namespace, ref.name, ref.key)
        theirs = k8s.secret_value(ctx.namespace, db_secret, db_key)
        if ours is None or ours != theirs:
            return [f"secret/{ref.name} key {ref.key} does not match the database's password (secret/{db_secret})"]
        return []


class DeletedSecretParams(FaultParams):
    secret: str = Field(pattern=NAME_PATTERN, max_length=253)


def _secrets_read(svc: ServiceSpec) -> list[str]:
    """The secrets the service's environment takes keys from, in the order it names them."""
    return list(dict.fromkeys(ref.name for ref in svc.refs().values() if ref.kind == "secret"))


class SecretDeleted(RolloutFault):
    """A Secret the target's environment reads (`valueFrom.secretKeyRef`, not optional) is deleted, then the target
    restarts. Running pods keep the environment they started with; each new container fails before it starts: the
    kubelet cannot build its environment (upstream pkg/kubelet/kubelet_pods.go `makeEnvironmentVariables` returns
    `secret "X" not found`, and the container waits in CreateContainerConfigError, pkg/kubelet/kuberuntime
    `ErrCreateContainerConfig`; https://kubernetes.io/docs/concepts/configuration/secret/#using-secrets-as-environment-variables).

    Nothing in the cluster holds the value any more, and only the credential's owner knows it: an agent that
    invented one would start pods that authenticate with nothing valid. The expected ending is a handover: escalate,
    changing nothing the human would have to undo."""

    name = "secret_deleted"
    summary = "delete a Secret the target reads its environment from, then restart it (CreateContainerConfigError)"
    fault_class = "config/secret-missing"
    modelled_on = "ITBench missing Kubernetes secret, AIOpsLab auth_miss (credentials removed)"
    Params = DeletedSecretParams
    expected_ending = "escalated"

    def targets(self, app: AppSpec) -> list[str]:
        return [s.name for s in app.services if _secrets_read(s)]

    def defaults(self, app: AppSpec, target: str) -> dict[str, Any]:
        return {"secret": _secrets_read(app.service(target))[0]}

    def validate(self, ctx: FaultContext) -> None:
        read = _secrets_read(ctx.svc)
        if ctx.params.secret not in read:
            raise FaultError(f"{ctx.target} reads no key of secret {ctx.params.secret!r} (it reads: {', '.join(read)})")

    def original(self, ctx: FaultContext) -> dict[str, str]:
        return ctx.app.secret_values(ctx.seed)[ctx.params.secret]

    def _inject(self, k8s: Kube, ctx: FaultContext) -> None:
        k8s.remove("secret", ctx.namespace, ctx.params.secret)
        k8s.rollout_restart(ctx.namespace, ctx.target)

    def _clear(self, k8s: Kube, ctx: FaultContext) -> None:
        if k8s.find("secret", ctx.params.secret, ctx.namespace) is None:
            k8s.create("secret", ctx.namespace, {
                "apiVersion": "v1", "kind": "Secret", "metadata": {"name": ctx.params.secret}, "type": "Opaque",
                "data": {k: base64.b64encode(v.encode()).decode() for k, v in self.original(ctx).items()}})
        k8s.rollout_restart(ctx.namespace, ctx.target)

    def root_cause(self, ctx: FaultContext) -> str:
        return f"secret/{ctx.params.secret}"

    def fix(self, ctx: FaultContext) -> list[ToolCall]:
        return [ToolCall(tool="escalate", args={
            "diagnosis": f"secret {ctx.params.secret}, which deployment {ctx.target} reads, is missing: its new pods "
                         f"fail with CreateContainerConfigError",
            "summary": "only the credential's owner knows its value; restore the secret, then restart the deployment"})]

    def wrong_fix(self, ctx: FaultContext) -> list[ToolCall]:
        """A rollback, claimed as the fix: the rollout goes back to pods that read the secret at start-up (where the
        old ones still run, it completes), and the next restart fails again."""
        return [*_undo(ctx), ToolCall(tool="finish", args={"diagnosis": f"the restart of {ctx.target} failed",
                                                           "summary": "rolled back"})]

    def _stored(self, k8s: Kube, ctx: FaultContext) -> dict[str, str | None] | None:
        if k8s.find("secret", ctx.params.secret, ctx.namespace) is None:
            return None
        return {k: k8s.secret_value(ctx.namespace, ctx.params.secret, k) for k in self.original(ctx)}

    def check(self, k8s: Kube, ctx: FaultContext, baseline: Any) -> list[str]:
        stored = self._stored(k8s, ctx)
        if stored is None:
            return [f"secret/{ctx.params.secret} is still missing"]
        return [] if stored == self.original(ctx) else [f"secret/{ctx.params.secret} does not hold its own values"]

    def handover_check(self, k8s: Kube, ctx: FaultContext, baseline: Any) -> list[str]:
        stored = self._stored(k8s, ctx)
        if stored is None or stored == self.original(ctx):
            return []
        return [f"secret/{ctx.params.secret} was recreated with values its owner never gave"]


class PullSecretParams(FaultParams):
    # the image pull secret the redeployed target names instead of the app's own; absent: the app's own is deleted
    secret: str | None = Field(None, pattern=NAME_PATTERN, max_length=253)
    expired: bool = False  # `secret` exists, with credentials the registry no longer accepts


class ImagePullSecret(RolloutFault):
    """A service of the private company registry pulls without valid credentials: redeployed naming another image
    pull secret (`secret`: missing, or `expired` credentials the registry revoked), or the app's own pull secret
    deleted and the service restarted. Its images pull with `imagePullPolicy: Always`, so every new container asks
    the registry, which answers 401 to credentials it does not accept: the kubelet reports ErrImagePull, then
    ImagePullBackOff (`Failed to pull image "...": ... unexpected status from HEAD request to
    https://registry.acme.internal/v2/.../manifests/TAG: 401 Unauthorized`), and a pull secret it cannot read is
    named in a `FailedToRetrieveImagePullSecret` warning (upstream pkg/kubelet/kubelet_pods.go
    `getPullSecretsForPod`; https://kubernetes.io/docs/concepts/containers/images/#specifying-imagepullsecrets-on-a-pod).
    Running pods keep serving: only new ones fail (see `RolloutFault`).

    With the app's own pull secret still there, a rollback (or naming it again) mends it; with it gone, only the
    registry's owner can issue credentials (no tool creates a secret): the expected ending is a handover."""

    name = "image_pull_secret"
    summary = "redeploy a service of the private registry naming a missing or expired image pull secret, or delete " \
              "the app's own (ImagePullBackOff: 401 Unauthorized)"
    fault_class = "config/pull-secret"
    modelled_on = "ITBench / AIOpsLab image pull failures: private registry credentials missing or revoked"
    Params = PullSecretParams

    def targets(self, app: AppSpec) -> list[str]:
        return [s.name for s in app.services if s.private]

    def validate(self, ctx: FaultContext) -> None:
        if ctx.params.secret == PULL_SECRET and not ctx.params.expired:
            raise FaultError(f"{PULL_SECRET} is the app's own pull secret, which works; name another, or none to "
                             f"delete it")
        if ctx.params.expired and ctx.params.secret in (None, PULL_SECRET):
            raise FaultError("expired credentials go in a secret of their own: name it (`secret`)")

    def ending(self, ctx: FaultContext) -> ExpectedEnding:
        return "finished" if ctx.params.secret else "escalated"

    def _pull_with(self, k8s: Kube, ctx: FaultContext, secret: str, cause: str | None = None) -> None:
        k8s.patch_deployment(ctx.namespace, ctx.target, {"spec": {"template": {"spec": {
            "imagePullSecrets": [{"name": secret}]}}}}, "merge", cause=cause)

    def _inject(self, k8s: Kube, ctx: FaultContext) -> None:
        secret = ctx.params.secret
        if secret is None:
            k8s.remove("secret", ctx.namespace, PULL_SECRET)
            k8s.rollout_restart(ctx.namespace, ctx.target)
            return
        if ctx.params.expired:
            user, token = ctx.app.registry_login(ctx.seed)
            k8s.create("secret", ctx.namespace, pull_secret(secret, ctx.namespace, user, token[::-1]))
        self._pull_with(k8s, ctx, secret, restart_cause(ctx, f"pull {ctx.target} with registry secret {secret}"))

    def _clear(self, k8s: Kube, ctx: FaultContext) -> None:
        if k8s.find("secret", PULL_SECRET, ctx.namespace) is None:
            k8s.create("secret", ctx.namespace,
                       pull_secret(PULL_SECRET, ctx.namespace, *ctx.app.registry_login(ctx.seed)))
        if ctx.params.expired:
            k8s.remove("secret", ctx.namespace, ctx.params.secret)
        self._pull_with(k8s, ctx, PULL_SECRET)

    def root_cause(self, ctx: FaultContext) -> str:
        return f"deployment/{ctx.target}" if ctx.params.secret else f"secret/{PULL_SECRET}"

    def fix(self, ctx: FaultContext) -> list[ToolCall]:
        if ctx.params.secret:
            return _undo(ctx)
        return [ToolCall(tool="escalate", args={
            "diagnosis": f"image pull secret {PULL_SECRET}, which deployment {ctx.target} pulls with, is missing: the "
                         f"registry answers 401 and its new pods stay in ImagePullBackOff",
            "summary": "only the registry's owner can issue credentials: restore the pull secret; I changed nothing"})]

    def direct_fix(self, ctx: FaultContext) -> list[ToolCall] | None:
        """Under a later rollout: name the app's own pull secret again."""
        if not ctx.params.secret:
            return self.fix(ctx)
        return [ToolCall(tool="patch", args={"kind": "deployment", "name": ctx.target, "patch_type": "merge", "patch": {
            "spec": {"template": {"spec": {"imagePullSecrets": [{"name": PULL_SECRET}]}}}}})]

    def wrong_fix(self, ctx: FaultContext) -> list[ToolCall]:
        """Taken for a bad tag: another tag of the same private image pulls with the same credentials."""
        return [ToolCall(tool="set_image", args={"deployment": ctx.target, "container": ctx.svc.container,
                                                 "image": f"{ctx.svc.repo}:{ctx.svc.previous_tag}"})]

    def check(self, k8s: Kube, ctx: FaultContext, baseline: Any) -> list[str]:
        dep = k8s.find("deployment", ctx.target, ctx.namespace) or {}
        named = [r.get("name") for r in (((dep.get("spec") or {}).get("template") or {}).get("spec") or {}).get(
            "imagePullSecrets") or []]
        stored = k8s.secret_value(ctx.namespace, PULL_SECRET, DOCKER_CONFIG_KEY)
        if stored != docker_config(ACME, *ctx.app.registry_login(ctx.seed)):
            return [f"secret/{PULL_SECRET} does not hold the registry's credentials"]
        return [] if PULL_SECRET in named else [f"deployment/{ctx.target} does not pull with {PULL_SECRET}"]


class ConfigParams(FaultParams):
    key: str = Field(pattern=r"^[-._a-zA-Z0-9]+$")
    value: str = Field(max_length=1024)


def _config_refs(app: AppSpec, svc: ServiceSpec) -> dict[str, tuple[str, Ref]]:
    """Config map keys this service validates at start-up: key -> (env var, reference)."""
    out = {}
    for env, ref in svc.refs().items():
        rule = svc.software.env.get(env)
        if ref.kind == "configmap" and rule is not None and rule.kind in ("int", "enum"):
            out[ref.key] = (env, ref)
    return out


class BadConfig(RolloutFault):
    name = "bad_config"
    summary = "write an invalid value into a config map key the target reads (CrashLoopBackOff after restart)"
    fault_class = "config/configmap"
    modelled_on = "ITBench misconfigured ConfigMap, AIOpsLab misconfig_app"
    Params = ConfigParams
    crashes = True

    def targets(self, app: AppSpec) -> list[str]:
        return [s.name for s in app.services if _config_refs(app, s)]

    def defaults(self, app: AppSpec, target: str) -> dict[str, Any]:
        svc = app.service(target)
        refs = _config_refs(app, svc)
        # prefer a key only this service reads: the blast radius of the injection stays on the target
        key = min(refs, key=lambda k: sum(1 for s in app.services if k in _config_refs(app, s)))
        env, ref = refs[key]
        original = app.configmaps[ref.name][key]
        return {"key": key, "value": f"{original}s" if svc.software.env[env].kind == "int" else "verbose"}

    def ref(self, ctx: FaultContext) -> tuple[str, Ref]:
        return _config_refs(ctx.app, ctx.svc)[ctx.params.key]

    def original(self, ctx: FaultContext) -> str:
        return ctx.app.configmaps[self.ref(ctx)[1].name][ctx.params.key]

    def validate(self, ctx: FaultContext) -> None:
        refs = _config_refs(ctx.app, ctx.svc)
        if ctx.params.key not in refs:
            raise FaultError(f"{ctx.target} does not read config key {ctx.params.key!r} (it reads: "
                             f"{', '.join(refs)})")
        if not self.rejections(ctx, ctx.params.value):
            raise FaultError(f"{ctx.params.key}={ctx.params.value!r} is a valid setting for {ctx.target}")

    def rejections(self, ctx: FaultContext, value: str) -> list[str]:
        """Consumers of the key that would refuse `value` at start-up."""
        check = run_context(ctx.app, ctx.namespace, ctx.seed)
        out = []
        for svc in ctx.app.services:
            refs = _config_refs(ctx.app, svc)
            if ctx.params.key in refs and refs[ctx.params.key][1].name == self.ref(ctx)[1].name:
                env = refs[ctx.params.key][0]
                if check_value(env, svc.software.env[env], value, svc.literal_env(), check) is not None:
                    out.append(svc.name)
        return out

    def _inject(self, k8s: Kube, ctx: FaultContext) -> None:
        k8s.set_configmap_key(ctx.namespace, self.ref(ctx)[1].name, ctx.params.key, ctx.params.value)
        k8s.rollout_restart(ctx.namespace, ctx.target)

    def _clear(self, k8s: Kube, ctx: FaultContext) -> None:
        k8s.set_configmap_key(ctx.namespace, self.ref(ctx)[1].name, ctx.params.key, self.original(ctx))
        k8s.rollout_restart(ctx.namespace, ctx.target)

    def root_cause(self, ctx: FaultContext) -> str:
        return f"configmap/{self.ref(ctx)[1].name}"

    def fix(self, ctx: FaultContext) -> list[ToolCall]:
        return [ToolCall(tool="set_config_key", args={"kind": "configmap", "name": self.ref(ctx)[1].name,
                                                      "key": ctx.params.key, "value": self.original(ctx)}),
                _restart(ctx)]

    def wrong_fix(self, ctx: FaultContext) -> list[ToolCall]:
        return _undo(ctx)

    def check(self, k8s: Kube, ctx: FaultContext, baseline: Any) -> list[str]:
        name = self.ref(ctx)[1].name
        value = ((k8s.find("configmap", name, ctx.namespace) or {}).get("data") or {}).get(ctx.params.key)
        if value is None:
            return [f"configmap/{name} has no key {ctx.params.key}"]
        broken = self.rejections(ctx, value)
        return [f"configmap/{name} {ctx.params.key}={value!r} is rejected by {', '.join(broken)}"] if broken else []
