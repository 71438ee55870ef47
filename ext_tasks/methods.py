"""Handlers of the 2026-07-28 core methods. Each takes a validated :class:`Call` and returns the result
object (without ``resultType`` bookkeeping beyond what it decides itself); errors are raised."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from .auth import Principal
from .context import Context, Emit, InputRequired
from .invoke import invoke_tool
from .mrtr import StartTaskHook, binding_for, run_round
from .protocol.envelope import Envelope
from .protocol.errors import InternalError, InvalidParams, MethodNotFound, ProtocolError, ResourceNotFound
from .protocol.jsonrpc import Request
from .protocol.resume import ResumeCodec
from .protocol.tasks import EXTENSION_ID, META_TTL_HINT
from .protocol.versions import MODERN_VERSIONS
from .protocol.wire import (
    CompleteParams,
    GetPromptParams,
    ListParams,
    ReadResourceParams,
    validate_params,
)
from .results import prompt_result, resource_result
from .task_methods import META_TASK_POLICY, TaskMethods, declares_tasks, require_tasks_extension
from .tools import ToolRegistry

logger = logging.getLogger("ext_tasks.methods")

Result = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Call:
    request: Request
    envelope: Envelope
    principal: Principal
    emit: Emit


@dataclass(frozen=True, slots=True)
class CacheOptions:
    ttl_ms: int
    scope: str  # "public" unless results depend on who asks


class CoreMethods:
    def __init__(
        self, registry: ToolRegistry, codec: ResumeCodec, cache: CacheOptions, tasks: TaskMethods | None = None
    ) -> None:
        self.registry = registry
        self.codec = codec
        self.cache = cache
        self.tasks = tasks
        #: Set for single-use requestState (``EXT_TASKS_STATE_SINGLE_USE``): the store's claim.
        self.claim_once: Callable[[str, int], Awaitable[bool]] | None = None

    def table(self) -> dict[str, Callable[[Call], Awaitable[Result]]]:
        return {
            "server/discover": self.discover,
            "tools/list": self.list_tools,
            "tools/call": self.call_tool,
            "prompts/list": self.list_prompts,
            "prompts/get": self.get_prompt,
            "resources/list": self.list_resources,
            "resources/templates/list": self.list_resource_templates,
            "resources/read": self.read_resource,
            "completion/complete": self.complete,
            "tasks/get": self.get_task,
            "tasks/update": self.update_task,
            "tasks/cancel": self.cancel_task,
        }

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

    def _cacheable(self, result: Result, ttl_ms: int | None = None) -> Result:
        result["resultType"] = "complete"
        result["ttlMs"] = self.cache.ttl_ms if ttl_ms is None else ttl_ms
        result["cacheScope"] = self.cache.scope
        return result

    # --- discovery and lists ----------------------------------------------------------------------

    async def discover(self, call: Call) -> Result:
        result: Result = {"supportedVersions": list(MODERN_VERSIONS), "capabilities": self.capabilities()}
        if self.registry.instructions:
            result["instructions"] = self.registry.instructions
        if self.tasks is not None:
            result["_meta"] = {META_TASK_POLICY: self.tasks.options.published()}
        return self._cacheable(result)

    async def list_tools(self, call: Call) -> Result:
        _no_cursor(call)
        return self._cacheable({"tools": [tool.describe() for tool in self.registry.tools.values()]})

    async def list_prompts(self, call: Call) -> Result:
        _no_cursor(call)
        return self._cacheable({"prompts": [prompt.describe() for prompt in self.registry.prompts.values()]})

    async def list_resources(self, call: Call) -> Result:
        _no_cursor(call)
        return self._cacheable({"resources": [item.describe() for item in self.registry.resources.values()]})

    async def list_resource_templates(self, call: Call) -> Result:
        _no_cursor(call)
        templates = [item.describe() for item in self.registry.templates.values()]
        return self._cacheable({"resourceTemplates": templates})

    # --- the three methods that may ask for input --------------------------------------------------

    async def call_tool(self, call: Call) -> Result:
        name, arguments = _call_target(call.request.params)
        tool = self.registry.tools.get(name)
        if tool is None:
            raise InvalidParams(f"Unknown tool: {name}")
        # A task is created only for a request that itself declares the extension; a stray legacy
        # `params.task` means nothing here (protocol.md §3.2-3.3).
        declares = declares_tasks(call.envelope)
        if tool.task == "required" and not declares:
            require_tasks_extension(call.envelope)  # -32021 before the function runs
        as_task = tool.task != "forbidden" and declares and self.tasks is not None
        hint = _ttl_hint(call.request.params)
        if as_task and not tool.preflight:
            assert self.tasks is not None
            tool.check_arguments(arguments)  # invalid arguments answer -32602 now, not as a failed task
            return await self.tasks.create(tool, arguments, call.envelope, call.principal, ttl_hint_ms=hint)

        async def body(ctx: Context) -> Result:
            return await invoke_tool(tool, arguments, ctx)

        async def start_task(answers: dict[str, Any], state: Any) -> Result:
            assert self.tasks is not None
            return await self.tasks.create(
                tool, arguments, call.envelope, call.principal, answers=answers, state=state, ttl_hint_ms=hint
            )

        return await self._round(call, "tools/call", name, arguments, body, start_task if as_task else None)

    async def get_prompt(self, call: Call) -> Result:
        params = validate_params(GetPromptParams, call.request.params)
        prompt = self.registry.prompts.get(params.name)
        if prompt is None:
            raise InvalidParams(f"Unknown prompt: {params.name}")
        arguments = params.arguments or {}

        async def body(ctx: Context) -> Result:
            value = await _call_or_internal(prompt.fn(**prompt.signature.bind(arguments, ctx)), f"prompt {prompt.name}")
            return prompt_result(value, prompt.description)

        return await self._round(call, "prompts/get", params.name, arguments, body)

    async def read_resource(self, call: Call) -> Result:
        params = validate_params(ReadResourceParams, call.request.params)
        found = self.registry.find_resource(params.uri)
        if found is None:
            raise ResourceNotFound(params.uri)
        resource, variables = found

        async def body(ctx: Context) -> Result:
            value = await _call_or_internal(
                resource.fn(**resource.signature.bind(variables, ctx)), f"resource {params.uri}"
            )
            return self._cacheable(resource_result(params.uri, resource.mime_type, value), ttl_ms=0)

        return await self._round(call, "resources/read", params.uri, {}, body)

    async def _round(
        self,
        call: Call,
        method: str,
        target: str,
        arguments: dict[str, Any],
        body: Callable[[Context], Awaitable[Result]],
        start_task: StartTaskHook | None = None,
    ) -> Result:
        return await run_round(
            self.codec,
            binding=binding_for(method, target, arguments, call.principal),
            params=call.request.params,
            envelope=call.envelope,
            principal=call.principal,
            emit=call.emit,
            body=body,
            start_task=start_task,
            claim_once=self.claim_once,
        )

    # --- the tasks extension ----------------------------------------------------------------------

    def _task_methods(self, call: Call) -> TaskMethods:
        if self.tasks is None:
            raise MethodNotFound(f"Method not found: {call.request.method}")
        return self.tasks

    async def get_task(self, call: Call) -> Result:
        return await self._task_methods(call).get(call.request.params, call.envelope, call.principal)

    async def update_task(self, call: Call) -> Result:
        return await self._task_methods(call).update(call.request.params, call.envelope, call.principal)

    async def cancel_task(self, call: Call) -> Result:
        return await self._task_methods(call).cancel(call.request.params, call.envelope, call.principal)

    # --- completion -------------------------------------------------------------------------------

    async def complete(self, call: Call) -> Result:
        params = validate_params(CompleteParams, call.request.params)
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
        return {
            "resultType": "complete",
            "completion": {"values": values[:100], "total": len(values), "hasMore": len(values) > 100},
        }


async def _call_or_internal(awaitable: Awaitable[Any], what: str) -> Any:
    try:
        return await awaitable
    except (InputRequired, ProtocolError):
        raise
    except Exception:
        logger.exception("%s raised", what)
        raise InternalError(f"Internal error in {what}") from None


def _call_target(params: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """``name`` and ``arguments`` of ``tools/call``, checked by hand: this is the hottest path, and the
    two fields are all it needs (``inputResponses`` and ``requestState`` are checked by the MRTR driver)."""
    name = params.get("name")
    if not isinstance(name, str):
        raise InvalidParams("Invalid params: name must be a string")
    arguments = params.get("arguments")
    if arguments is None:
        return name, {}
    if not isinstance(arguments, dict):
        raise InvalidParams("Invalid params: arguments must be an object")
    return name, arguments


def _ttl_hint(params: dict[str, Any]) -> int | None:
    hint = params["_meta"].get(META_TTL_HINT)
    return hint if isinstance(hint, int) and not isinstance(hint, bool) and hint > 0 else None


def _no_cursor(call: Call) -> None:
    params = validate_params(ListParams, call.request.params)
    if params.cursor is not None:
        # Every list fits in one page, so this server never hands out a cursor.
        raise InvalidParams("Invalid params: unknown cursor")
