"""`execute`: the single entry point from a `ToolCall` to a `ToolResult`, which never raises.

Order of checks: the tool exists, its arguments validate against the contract (`agent_sre.models.tools`), the
guardrails pass; only then does the tool touch the cluster. Anything that stops a call before the cluster is a
refusal (`refused=True`); an error from the cluster or an impossible request is a failure (`ok=False`). Either
way the model reads a one-line explanation, as `kubectl` would print it. A write the rules judge high-risk is a
refusal too, unless the call is approved, and carries the judgement (`needs_approval`) for the workflow to ask a
human and run it again approved.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from pydantic import ValidationError
from urllib3.exceptions import HTTPError

from agent_sre.config import Settings, get_settings
from agent_sre.kube.client import KubeError
from agent_sre.models.tools import TOOL_SPECS, ToolCall, ToolInvocation, ToolResult, WriteAssessment
from agent_sre.tools import read, write
from agent_sre.tools.client import KubeconfigError, api_client
from agent_sre.tools.context import ToolContext, ToolFailure
from agent_sre.tools.guardrails import NeedsApproval, Refusal, check_call
from agent_sre.tools.render import clip
from agent_sre.tools.write_rules import WriteRules

log = logging.getLogger(__name__)

TOOLS: dict[str, Callable[[ToolContext, Any], str | write.Outcome]] = {
    "list_pods": read.list_pods,
    "describe": read.describe,
    "get_logs": read.get_logs,
    "get_events": read.get_events,
    "get_endpoints": read.get_endpoints,
    "top": read.top,
    "rollout_history": read.rollout_history,
    "rollout_status": read.rollout_status,
    "list_chaos_experiments": read.list_chaos_experiments,
    "list_network_policies": read.list_network_policies,
    "list_nodes": read.list_nodes,
    "get_resource": read.get_resource,
    "finish": read.finish,
    "escalate": read.escalate,
    "patch": write.patch,
    "set_image": write.set_image,
    "rollout_undo": write.rollout_undo,
    "scale": write.scale,
    "rollout_restart": write.rollout_restart,
    "patch_service": write.patch_service,
    "set_resources": write.set_resources,
    "set_env": write.set_env,
    "remove_scheduling_constraints": write.remove_scheduling_constraints,
    "uncordon": write.uncordon,
    "delete_pod": write.delete_pod,
    "delete_chaos_experiment": write.delete_chaos_experiment,
    "set_config_key": write.set_config_key,
    "delete_network_policy": write.delete_network_policy,
    "patch_quota": write.patch_quota,
    "set_hpa_max": write.set_hpa_max,
}


def _validation_errors(exc: ValidationError) -> str:
    """Pydantic's errors as `field: message`, without echoing the (possibly huge or hostile) input."""
    parts = [f"{'.'.join(str(p) for p in e['loc']) or 'args'}: {e['msg']}" for e in exc.errors()[:5]]
    more = len(exc.errors()) - len(parts)
    return "; ".join(parts) + (f"; and {more} more" if more > 0 else "")


def _refused(tool: str, why: str) -> ToolResult:
    return ToolResult(tool=tool, ok=False, refused=True, error=why, output=f"refused: {why}")


def _held(tool: str, assessment: WriteAssessment) -> ToolResult:
    why = f"needs approval: {assessment.reasons('high')}"
    return ToolResult(tool=tool, ok=False, refused=True, error=why, output=why, needs_approval=assessment)


def _failed(tool: str, message: str) -> ToolResult:
    return ToolResult(tool=tool, ok=False, error=message, output=message)


def _run(call: ToolCall, ctx: ToolContext) -> ToolResult:
    spec = TOOL_SPECS.get(call.tool)
    if spec is None:
        return _refused(call.tool[:100], f"unknown tool {call.tool[:100]!r}; the tools are: {', '.join(TOOL_SPECS)}")
    if spec.write and "namespace" in call.args:
        return _refused(call.tool, f"writes are confined to the incident's namespace {ctx.namespace!r}; "
                                   f"a write tool takes no namespace argument")
    try:
        args = spec.args.model_validate(call.args)
    except ValidationError as exc:
        return _refused(call.tool, f"invalid arguments for {call.tool}: {_validation_errors(exc)}")
    try:
        check_call(call.tool, args, ctx.namespace, ctx.idempotency_key)
        out = TOOLS[call.tool](ctx, args)
    except NeedsApproval as exc:
        return _held(call.tool, exc.assessment)
    except Refusal as exc:
        return _refused(call.tool, str(exc))
    except KubeError as exc:
        return _failed(call.tool, str(exc))
    except ToolFailure as exc:
        return _failed(call.tool, f"error: {exc}")
    except (HTTPError, OSError) as exc:
        return _failed(call.tool, f"error: cannot reach the cluster: {type(exc).__name__}: {exc}")
    except Exception as exc:  # a bug here must not crash the agent's episode; it is logged and reported
        log.exception("tool %s failed", call.tool)
        return _failed(call.tool, f"error: internal error in {call.tool}: {type(exc).__name__}: {exc}")
    if isinstance(out, write.Outcome):
        return ToolResult(tool=call.tool, ok=True, output=clip(out.output, ctx.max_chars),
                          idempotent_replay=out.replay)
    return ToolResult(tool=call.tool, ok=True, output=clip(out, ctx.max_chars))


def execute(call: ToolCall, ctx: ToolContext) -> ToolResult:
    """Run one tool call in `ctx`; every outcome, refusals and errors included, comes back as a ToolResult."""
    start = time.perf_counter()
    result = _run(call, ctx)
    result.duration_ms = (time.perf_counter() - start) * 1000
    return result


def execute_invocation(invocation: ToolInvocation, attempt: int = 1, settings: Settings | None = None) -> ToolResult:
    """`execute` for a call that crossed a process boundary (the tool activity): the client comes from the
    kubeconfig, `attempt` from the activity's retry count, the write rules from `settings` (a worker's own;
    default: the environment's)."""
    settings = settings or get_settings()
    try:
        client = api_client(invocation.kubeconfig, settings=settings)
    except KubeconfigError as exc:
        return _failed(invocation.call.tool, f"error: {exc}")
    ctx = ToolContext(api=client, namespace=invocation.namespace, idempotency_key=invocation.idempotency_key,
                      attempt=attempt, max_chars=invocation.max_chars, approved=invocation.approved,
                      rules=WriteRules(settings.allowed_image_sources, settings.max_replicas))
    return execute(invocation.call, ctx)
