"""Answering a server's input requests (elicitation, sampling, roots) with the caller's callbacks, and
the client capabilities those callbacks amount to (declared on every request: 2026-07-28 remembers
nothing between requests).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from .errors import InvalidResponse

TASKS_EXTENSION: Final = "io.modelcontextprotocol/tasks"
#: The elicitation modes of 2026-07-28: a form the client renders, or a page the person opens.
ELICITATION_MODES: Final = frozenset({"form", "url"})

#: ``params`` of an ``elicitation/create`` request -> an ElicitResult (``{"action": ..., "content": ...}``).
Elicit = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]
#: ``params`` of a ``sampling/createMessage`` request -> a CreateMessageResult.
Sample = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]
#: The client's roots (``[{"uri": "file:///...", "name": ...}]``), or a function giving them.
Roots = Sequence[Mapping[str, Any]] | Callable[[], Awaitable[Sequence[Mapping[str, Any]]]]


@dataclass(frozen=True, slots=True)
class InputHandlers:
    elicitation: Elicit | None = None
    sampling: Sample | None = None
    roots: Roots | None = None
    #: Declare the Tasks extension (the server may then answer ``tools/call`` with a task).
    tasks: bool = True
    #: The elicitation modes the ``elicitation`` callback handles (and that are declared).
    elicitation_modes: frozenset[str] = frozenset({"form"})

    def __post_init__(self) -> None:
        unknown = set(self.elicitation_modes) - ELICITATION_MODES
        if unknown or not self.elicitation_modes:
            given = sorted(self.elicitation_modes)
            raise ValueError(f"elicitation_modes: one or more of {sorted(ELICITATION_MODES)}, not {given}")

    def capabilities(self) -> dict[str, Any]:
        """``_meta["io.modelcontextprotocol/clientCapabilities"]`` for every request."""
        declared: dict[str, Any] = {}
        if self.elicitation is not None:
            # ``{}`` means form only (protocol.md §1.5), as this client always declared it.
            form_only = self.elicitation_modes == {"form"}
            declared["elicitation"] = {} if form_only else {mode: {} for mode in sorted(self.elicitation_modes)}
        if self.sampling is not None:
            declared["sampling"] = {}
        if self.roots is not None:
            declared["roots"] = {}
        if self.tasks:
            declared["extensions"] = {TASKS_EXTENSION: {}}
        return declared

    async def answer(self, requests: object) -> dict[str, Any]:
        """One response per input request, keyed as the server keyed them (answered concurrently: a
        person may be asked while a model is sampled)."""
        if not isinstance(requests, Mapping):
            raise InvalidResponse("inputRequests is not an object")
        keys = list(requests)
        answers = await asyncio.gather(*(self._answer_one(str(key), requests[key]) for key in keys))
        return dict(zip((str(key) for key in keys), answers, strict=True))

    async def _answer_one(self, key: str, request: object) -> dict[str, Any]:
        if not isinstance(request, Mapping):
            raise InvalidResponse(f"input request {key!r} is not an object")
        method = request.get("method")
        raw_params = request.get("params")
        params = dict(raw_params) if isinstance(raw_params, Mapping) else {}
        if method == "elicitation/create" and self.elicitation is not None:
            mode = params.get("mode", "form")  # omitted: a form
            if not isinstance(mode, str) or mode not in self.elicitation_modes:
                # A mode this request did not declare never reaches the callback, written for the modes
                # it declared: shown as a form, a URL request has no fields and would be accepted unseen.
                return {"action": "decline"}
            return await self.elicitation(params)
        if method == "sampling/createMessage" and self.sampling is not None:
            return await self.sampling(params)
        if method == "roots/list" and self.roots is not None:
            roots = await self.roots() if callable(self.roots) else self.roots
            return {"roots": [dict(root) for root in roots]}
        # A server may only ask for what the request declared (protocol.md §2.4, rule 7).
        raise InvalidResponse(f"the server asked for {method!r} (input {key!r}), which this client did not declare")
