"""Handlers of the 2026-07-28 core methods, on typed requests (``protocol.requests``).

Each takes the checked :class:`~.protocol.requests.Call`, the caller and where its notifications go,
and returns its typed result (``protocol.result_types``), built once: the engine adds ``_meta`` and the
encoder ``resultType``. Failures are raised (the engine maps them, once). ``tools/call`` is handed the
call and the tool the engine already parsed and looked up for the envelope check.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Final

from .auth import InsufficientScope, Principal
from .context import Context, Emit, InputRequired
from .failures import Guard
from .invoke import invoke_tool
from .mrtr import ClaimOnce, StartTaskHook, binding_for, run_round
from .protocol.errors import InvalidParams, ResourceNotFound
from .protocol.params import CompleteParams
from .protocol.requests import (
    Call,
    Listing,
    NoParams,
    PromptGet,
    ResourceRead,
    Round,
    ToolCall,
    declares_tasks,
    require_tasks_extension,
)
from .protocol.result_types import (
    CompleteResult,
    DiscoverResult,
    GetPromptResult,
    ListPromptsResult,
    ListResourcesResult,
    ListResourceTemplatesResult,
    ListToolsResult,
    ReadResourceResult,
    TypedResult,
)
from .protocol.resume import ResumeCodec
from .protocol.tasks import EXTENSION_ID
from .protocol.versions import MODERN_VERSIONS
from .results import prompt_result, resource_contents
from .task_methods import META_TASK_POLICY, TaskMethods
from .tools import Tool, ToolRegistry

logger = logging.getLogger("ext_tasks.methods")
#: A prompt's or resource's failure: a ProtocolError as it is, anything else logged and -32603.
_FAILURES: Final = Guard(logger, "%s raised")


@dataclass(frozen=True, slots=True)
class CacheOptions:
    ttl_ms: int
    scope: str  # "public" unless results depend on who asks


class CoreMethods:
    def __init__(
        self,
        registry: ToolRegistry,
        codec: ResumeCodec,
        cache: CacheOptions,
        tasks: TaskMethods | None = None,
        *,
        claim_once: ClaimOnce | None = None,
    ) -> None:
        self.registry = registry
        self.codec = codec
        self.cache = cache
        self.tasks = tasks
        #: Single-use requestState (``EXT_TASKS_STATE_SINGLE_USE``): the store's claim.
        self.claim_once = claim_once

    def capabilities(self) -> dict[str, Any]:
        capabilities: dict[str, Any] = {
            "tools": {"listChanged": True},
            "prompts": {"listChanged": True},
            "resources": {"listChanged": True, "subscribe": True},
            "completions": {},
            "logging": {},
        }
        if self.tasks is not None:
            capabilities["extensions"] = {EXTENSION_ID: {}}
        return capabilities

    # --- discovery and lists ----------------------------------------------------------------------

    async def discover(self, call: Call[NoParams], principal: Principal, emit: Emit) -> DiscoverResult:
        cache = self.cache
        result = DiscoverResult(
            supported_versions=list(MODERN_VERSIONS),
            capabilities=self.capabilities(),
            ttl_ms=cache.ttl_ms,
            cache_scope=cache.scope,
        )
        if self.registry.instructions:
            result.instructions = self.registry.instructions
        if self.tasks is not None:
            result.meta = {META_TASK_POLICY: self.tasks.options.published()}
        return result

    async def list_tools(self, call: Call[Listing], principal: Principal, emit: Emit) -> ListToolsResult:
        _no_cursor(call.params)
        # A caller sees only the tools its token's scopes let it call (all of them without OAuth).
        tools = [tool.describe() for tool in self.registry.tools.values() if not principal.lacks(tool.scopes)]
        return ListToolsResult(tools=tools, ttl_ms=self.cache.ttl_ms, cache_scope=self.cache.scope)

    async def list_prompts(self, call: Call[Listing], principal: Principal, emit: Emit) -> ListPromptsResult:
        _no_cursor(call.params)
        prompts = [prompt.describe() for prompt in self.registry.prompts.values()]
        return ListPromptsResult(prompts=prompts, ttl_ms=self.cache.ttl_ms, cache_scope=self.cache.scope)

    async def list_resources(self, call: Call[Listing], principal: Principal, emit: Emit) -> ListResourcesResult:
        _no_cursor(call.params)
        resources = [item.describe() for item in self.registry.resources.values()]
        return ListResourcesResult(resources=resources, ttl_ms=self.cache.ttl_ms, cache_scope=self.cache.scope)

    async def list_resource_templates(
        self, call: Call[Listing], principal: Principal, emit: Emit
    ) -> ListResourceTemplatesResult:
        _no_cursor(call.params)
        templates = [item.describe() for item in self.registry.templates.values()]
        cache = self.cache
        return ListResourceTemplatesResult(resource_templates=templates, ttl_ms=cache.ttl_ms, cache_scope=cache.scope)

    # --- the three methods that may ask for input --------------------------------------------------

    async def call_tool(self, call: Call[ToolCall], tool: Tool | None, principal: Principal, emit: Emit) -> TypedResult:
        params = call.params
        if tool is None:
            raise InvalidParams(f"Unknown tool: {params.name}")
        if principal.lacks(tool.scopes):  # the spec's step-up: 403, and the scopes that would do
            raise InsufficientScope(tool.scopes)
        # A task is created only for a request that itself declares the extension; a stray legacy
        # `params.task` means nothing here (protocol.md §3.2-3.3).
        declares = declares_tasks(call.envelope)
        if tool.task == "required" and not declares:
            require_tasks_extension(call.envelope)  # -32021 before the function runs
        as_task = tool.task != "forbidden" and declares and self.tasks is not None
        arguments = params.arguments
        if as_task and not tool.preflight:
            assert self.tasks is not None
            tool.check_arguments(arguments)  # invalid arguments answer -32602 now, not as a failed task
            return await self.tasks.create(tool, arguments, call.envelope, principal)

        def body(ctx: Context) -> Awaitable[TypedResult]:
            return invoke_tool(tool, arguments, ctx)

        async def start_task(answers: dict[str, Any], state: Any) -> TypedResult:
            assert self.tasks is not None
            return await self.tasks.create(tool, arguments, call.envelope, principal, answers=answers, state=state)

        hook = start_task if as_task else None
        return await self._round(call, "tools/call", params.name, arguments, params.round, principal, emit, body, hook)

    async def get_prompt(self, call: Call[PromptGet], principal: Principal, emit: Emit) -> TypedResult:
        params = call.params
        prompt = self.registry.prompts.get(params.name)
        if prompt is None:
            raise InvalidParams(f"Unknown prompt: {params.name}")

        async def body(ctx: Context) -> GetPromptResult:
            kwargs = prompt.signature.bind(params.arguments, ctx)
            value = await _call_or_internal(prompt.fn(**kwargs), f"prompt {prompt.name}")
            return prompt_result(value, prompt.description)

        return await self._round(
            call, "prompts/get", params.name, params.arguments, params.round, principal, emit, body
        )

    async def read_resource(self, call: Call[ResourceRead], principal: Principal, emit: Emit) -> TypedResult:
        uri = call.params.uri
        found = self.registry.find_resource(uri)
        if found is None:
            raise ResourceNotFound(uri)
        resource, variables = found

        async def body(ctx: Context) -> ReadResourceResult:
            value = await _call_or_internal(resource.fn(**resource.signature.bind(variables, ctx)), f"resource {uri}")
            # A resource's contents may change at any time: a client may not cache them.
            contents = resource_contents(uri, resource.mime_type, value)
            return ReadResourceResult(contents=contents, ttl_ms=0, cache_scope=self.cache.scope)

        return await self._round(call, "resources/read", uri, {}, call.params.round, principal, emit, body)

    def _round(
        self,
        call: Call[Any],
        method: str,
        target: str,
        arguments: dict[str, Any],
        round: Round,
        principal: Principal,
        emit: Emit,
        body: Callable[[Context], Awaitable[TypedResult]],
        start_task: StartTaskHook | None = None,
    ) -> Awaitable[TypedResult]:
        # run_round's coroutine itself (no pass-through coroutine around it): the hot path.
        return run_round(
            self.codec,
            binding=binding_for(method, target, arguments, principal),
            round=round,
            envelope=call.envelope,
            principal=principal,
            emit=emit,
            body=body,
            start_task=start_task,
            claim_once=self.claim_once,
        )

    # --- completion -------------------------------------------------------------------------------

    async def complete(self, call: Call[CompleteParams], principal: Principal, emit: Emit) -> CompleteResult:
        params = call.params
        ref = params.ref.name if params.ref.type == "ref/prompt" else params.ref.uri
        if ref is None:
            raise InvalidParams("Invalid params: ref needs a name (prompt) or uri (resource)")
        if params.ref.type == "ref/prompt" and ref not in self.registry.prompts:
            raise InvalidParams(f"Unknown prompt: {ref}")
        completer = self.registry.completers.get((params.ref.type, ref))
        values: list[str] = []
        if completer is not None:
            context_arguments = (params.context.arguments if params.context else None) or {}
            values = await completer(params.argument.name, params.argument.value, context_arguments)
        # The spec caps one response at 100 values; `hasMore` says there were more.
        return CompleteResult(completion={"values": values[:100], "total": len(values), "hasMore": len(values) > 100})


async def _call_or_internal(awaitable: Awaitable[Any], what: str) -> Any:
    try:
        return await awaitable
    except InputRequired:
        raise
    except Exception as exc:  # noqa: BLE001 - the engine's guard answers it; only the message names what failed
        raise _FAILURES.error(exc, what, message=f"Internal error in {what}") from None


def _no_cursor(params: Listing) -> None:
    if params.cursor is not None:
        # Every list fits in one page, so this server never hands out a cursor.
        raise InvalidParams("Invalid params: unknown cursor")
