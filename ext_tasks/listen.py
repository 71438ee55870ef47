"""``subscriptions/listen``: one SSE stream per request, fed by the change hub.

The acknowledgement (``notifications/subscriptions/acknowledged``, with the subset honored) comes
once the stream holds its place among the caller's waits and its subscriptions are live, so a refusal
(429) or a store failure (503) is still the HTTP answer. Only the caller's own tasks are honored;
others are left out of the acknowledgement exactly like ids that do not exist (one store round trip
for all of them). Every notification carries the subscription id; the server ends a stream gracefully
with its JSON-RPC result (shutdown, or a watched task lost with the store).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any, Final

from .auth import Principal
from .notify import ChangeEvent, ChangeHub, task_notification
from .pacing import Pacing, listen_cost
from .protocol.jsonrpc import RequestId, notification_message
from .protocol.params import ListenParams
from .protocol.result_types import Complete
from .protocol.versions import META_SUBSCRIPTION_ID
from .replies import Message, StreamItem, StreamReply, chained
from .task_methods import TaskMethods
from .waits import WaitLimit

#: Per list kind: the flag of the listen filter, and the notification it asks for.
LIST_CHANGED: Final = {
    "tools": ("toolsListChanged", "notifications/tools/list_changed"),
    "prompts": ("promptsListChanged", "notifications/prompts/list_changed"),
    "resources": ("resourcesListChanged", "notifications/resources/list_changed"),
}


class Subscriptions:
    def __init__(
        self,
        hub: ChangeHub,
        waits: WaitLimit,
        tasks: TaskMethods | None,
        keepalive_s: float,
        final: Callable[[RequestId, Complete], Message],
        *,
        pacing: Pacing | None = None,
    ) -> None:
        self.hub = hub
        self.pacing = pacing
        self.waits = waits
        self.tasks = tasks
        self.keepalive_s = keepalive_s
        self._final = final  # the engine's result message (it adds what every result carries)

    async def open(
        self, request_id: RequestId, params: ListenParams, principal: Principal, own_wait: bool
    ) -> StreamReply:
        wanted = params.notifications
        if self.pacing is not None and own_wait:
            # Checking ids against the store is what a listen costs: charged before it is done. A listen
            # the legacy shim opens for a GET stream (``own_wait=False``) follows the session's own tasks,
            # at most the shim's bound of them, and is not the client's request: not charged.
            cost = listen_cost(len(wanted.task_ids or ()), len(wanted.resource_subscriptions or ()))
            self.pacing.charge(principal.id, cost, kind="listen")
        honored: dict[str, Any] = {}
        for kind, (flag, _) in LIST_CHANGED.items():
            if getattr(wanted, f"{kind}_list_changed"):
                honored[flag] = True
        if wanted.resource_subscriptions:
            honored["resourceSubscriptions"] = list(dict.fromkeys(wanted.resource_subscriptions))
        if wanted.task_ids is not None and self.tasks is not None:
            # A server without tasks acknowledges the rest and leaves taskIds out: nothing to watch.
            honored["taskIds"] = await self.tasks.owned(list(dict.fromkeys(wanted.task_ids)), principal)
        stream = self._stream(request_id, honored, principal, own_wait)
        first = await anext(stream)
        return StreamReply(chained(first, stream))

    async def _stream(
        self, subscription_id: RequestId, honored: dict[str, Any], principal: Principal, own_wait: bool
    ) -> AsyncIterator[StreamItem]:
        meta = {META_SUBSCRIPTION_ID: subscription_id}
        watched = set(honored.get("resourceSubscriptions", ()))
        task_ids = frozenset(honored.get("taskIds", ()))
        # ``own_wait=False``: opened for a wait already counted (a legacy GET stream follows its tasks).
        with self.waits.hold(principal.id) if own_wait else contextlib.nullcontext():
            async with self.hub.subscribe(task_ids) as events:
                yield notification_message(
                    "notifications/subscriptions/acknowledged", {"_meta": meta, "notifications": honored}
                )
                while True:
                    try:
                        # asyncio.timeout, not wait_for: on Python 3.11 wait_for can swallow a cancellation
                        # that arrives as the get completes, and the stream would outlive its client.
                        async with asyncio.timeout(self.keepalive_s):
                            event = await events.get()
                    except TimeoutError:
                        yield None
                        continue
                    if ChangeHub.is_closing(event):
                        yield self._final(subscription_id, Complete(meta=dict(meta)))
                        return
                    notification = _notification(event, honored, watched, principal)
                    if notification is not None:
                        yield {**notification, "params": {**notification["params"], "_meta": dict(meta)}}


def _notification(
    event: ChangeEvent, honored: dict[str, Any], watched: set[str], principal: Principal
) -> Message | None:
    if event.kind in LIST_CHANGED and honored.get(LIST_CHANGED[event.kind][0]):
        return notification_message(LIST_CHANGED[event.kind][1], {})
    if event.kind == "resource" and event.uri in watched:
        return notification_message("notifications/resources/updated", {"uri": event.uri})
    if event.kind == "task" and event.task is not None and event.task.owner == principal.id:
        return notification_message("notifications/tasks", task_notification(event.task))
    return None
