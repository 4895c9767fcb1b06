"""Signals whose arguments do not fit their handler are dropped with a warning, as the SDK drops ones whose payload
fails to decode.

Without this, `temporal workflow signal --name approve_action` given no `--input` (or one too many) calls the
handler with the wrong number of arguments; the TypeError fails the workflow task, the server retries it for as
long as the workflow may run, and the incident stops answering queries.
"""

from __future__ import annotations

import inspect

from temporalio import workflow
from temporalio.worker import HandleSignalInput, Interceptor, WorkflowInboundInterceptor, WorkflowInterceptorClassInput


class SignalArgumentsInterceptor(Interceptor):
    def workflow_interceptor_class(self, input: WorkflowInterceptorClassInput) -> type[WorkflowInboundInterceptor]:
        return _SignalArgumentsInbound


class _SignalArgumentsInbound(WorkflowInboundInterceptor):
    async def handle_signal(self, input: HandleSignalInput) -> None:
        handler = workflow.get_signal_handler(input.signal)
        if handler is not None:
            try:
                inspect.signature(handler).bind(*input.args)
            except TypeError as err:
                workflow.logger.warning("dropping signal %r: its arguments do not fit its handler (%s)",
                                        input.signal, err)
                return
        await super().handle_signal(input)
