"""The tool-author API: register tools, prompts and resources from plain async functions.

::

    registry = ToolRegistry("weather", version="1.0.0")

    @registry.tool(description="Forecast for a city")
    async def forecast(ctx: Context, city: str, days: int = 3) -> str:
        unit = await ctx.elicit("unit", "Celsius or Fahrenheit?", {"type": "object", ...})
        ...

The input schema comes from the type hints (through pydantic); a parameter annotated ``Context``
receives the request context and is left out of the schema. Arguments are validated before the
function runs; invalid ones answer -32602. ``Header("Name")`` on a string parameter marks it as
mirrored in an ``Mcp-Param-Name`` HTTP header (SEP-2243).

Changing the registered set after start (``remove_tool`` and friends) notifies listeners, which is how
``notifications/*/list_changed`` reach ``subscriptions/listen`` streams.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

from pydantic import Field

from .auth import check_scopes
from .catalog import Fn, Prompt, Resource, ResourceTemplate, template_pattern
from .context import Context
from .retention import Retention
from .retry import Retry
from .signatures import Signature

F = TypeVar("F", bound=Fn)
T = TypeVar("T")
ChangeKind = Literal["tools", "prompts", "resources", "resource"]
#: Whether a tool runs as a task: never, when the client declares the extension, or always.
TaskSupport = Literal["forbidden", "optional", "required"]


def scope_tokens(scopes: Sequence[str]) -> tuple[str, ...]:
    """``scopes`` checked as OAuth scope tokens (so they can go into a ``WWW-Authenticate`` header as
    they are), without repeats, in their order."""
    if isinstance(scopes, str):  # "deploy" would otherwise be six one-letter scopes
        raise ValueError("scopes must be a list of scope names, not one string")
    return check_scopes(scopes)


def Header(name: str, description: str | None = None) -> Any:  # noqa: N802 - reads like an annotation
    """Mark a parameter as mirrored in the ``Mcp-Param-{name}`` header: ``Annotated[str, Header("Region")]``."""
    return Field(description=description, json_schema_extra={"x-mcp-header": name})


@dataclass
class Tool:
    name: str
    fn: Fn
    description: str
    signature: Signature
    input_schema: dict[str, Any]
    raw_schema: bool = False
    title: str | None = None
    annotations: dict[str, Any] | None = None
    header_params: dict[str, str] = field(default_factory=dict)
    task: TaskSupport = "forbidden"
    preflight: bool = False
    ttl_ms: int | None = None
    poll_max_ms: int | None = None
    sensitive: bool = False
    #: The longest one run of the function may take (seconds); past it the task ends ``failed``.
    timeout_s: float | None = None
    #: The longest the task may wait in ``input_required`` for answers (seconds); then it ends ``failed``.
    input_timeout_s: float | None = None
    #: How long its finished tasks are kept, by outcome (``None``: the server's settings).
    retention: Retention | None = None
    #: OAuth scopes a caller's token must carry to see and call the tool (besides the server's own).
    scopes: tuple[str, ...] = ()
    #: Inside a task: run again, with backoff, after an exception the policy names (``None``: never).
    retry: Retry | None = None
    #: Runs of the tool at once over the fleet (per key, with ``concurrency_key``); ``None``: no bound.
    concurrency: int | None = None
    #: The key runs are bounded by, from the arguments (``lambda args: args["service"]``).
    concurrency_key: Callable[[Mapping[str, Any]], object] | None = None

    def describe(self) -> dict[str, Any]:
        described: dict[str, Any] = {
            "name": self.name,
            "description": self.description,
            "inputSchema": self.input_schema,
        }
        if self.title:
            described["title"] = self.title
        if self.annotations:
            described["annotations"] = self.annotations
        return described

    def check_arguments(self, arguments: Mapping[str, Any]) -> None:
        """Raise -32602 if ``arguments`` do not fit the generated schema (raw schemas are not checked)."""
        if not self.raw_schema:
            self.signature.validate(arguments)

    def bind(self, arguments: Mapping[str, Any], ctx: Context) -> dict[str, Any]:
        if self.raw_schema:
            # A hand-written schema is published as is; the function receives the arguments unvalidated,
            # minus names it does not take (unless it takes **kwargs).
            known = self.signature.field_names
            kwargs = {
                name: value for name, value in arguments.items() if self.signature.accepts_any_keyword or name in known
            }
            if self.signature.context_param is not None:
                kwargs[self.signature.context_param] = ctx
            return kwargs
        return self.signature.bind(arguments, ctx)


Completer = Callable[[str, str, Mapping[str, str]], Awaitable[list[str]]]


class ToolRegistry:
    """Everything a server exposes: tools, prompts, resources, resource templates and completions."""

    def __init__(self, name: str, *, version: str = "0.0.0", instructions: str | None = None) -> None:
        self.name = name
        self.version = version
        self.instructions = instructions
        self.tools: dict[str, Tool] = {}
        self.prompts: dict[str, Prompt] = {}
        self.resources: dict[str, Resource] = {}
        self.templates: dict[str, ResourceTemplate] = {}
        self.completers: dict[tuple[str, str], Completer] = {}
        self._listeners: list[Callable[[ChangeKind, str | None], None]] = []

    # --- registration -----------------------------------------------------------------------------

    def tool(
        self,
        name: str | None = None,
        *,
        description: str | None = None,
        title: str | None = None,
        annotations: Mapping[str, Any] | None = None,
        input_schema: Mapping[str, Any] | None = None,
        task: TaskSupport = "forbidden",
        preflight: bool = False,
        ttl_ms: int | None = None,
        poll_max_ms: int | None = None,
        sensitive: bool = False,
        scopes: Sequence[str] = (),
        timeout_s: float | None = None,
        input_timeout_s: float | None = None,
        retention: Retention | None = None,
        retry: Retry | None = None,
        concurrency: int | None = None,
        concurrency_key: Callable[[Mapping[str, Any]], object] | None = None,
    ) -> Callable[[F], F]:
        """Register an async function as a tool.

        ``task``: ``"forbidden"`` (default) always answers inline; ``"optional"`` runs as a task when the
        request declares the tasks extension, inline otherwise; ``"required"`` runs only as a task and
        answers -32021 to a request that does not declare the extension. ``preflight=True`` runs the
        function inline first, so it can ask for input through multi round-trip requests, until it
        calls ``await ctx.start_task()``. ``ttl_ms`` overrides the server's default task lifetime
        (capped by the server's maximum); ``poll_max_ms`` the ceiling of the suggested poll interval.
        ``sensitive=True``: once ``tasks/get`` has delivered the outcome, the task is kept only for the
        server's short grace period, and ``ttlMs`` says so. ``scopes``: the OAuth scopes a caller's token
        must carry to see the tool in ``tools/list`` and to call it (a token without them gets 403
        ``insufficient_scope``, the spec's step-up); callers with a static token or none pass.
        ``timeout_s``: the longest one run of the function may take as a task (it is then cancelled on
        whichever instance runs it and the task ends ``failed``); ``input_timeout_s``: the longest the task
        may wait for answers in ``input_required`` (then it ends ``failed``); ``retention``: how long its
        finished tasks are kept, by outcome (:class:`Retention`).
        ``retry=Retry(attempts=5, backoff=Backoff(...), on=(TransientError,))``: inside a task, an
        exception among ``on`` schedules the next attempt after the backoff (the task stays ``working``);
        past the last attempt the task ends ``failed``. A ``ToolError`` is retried only if ``on`` names
        it (see :mod:`ext_tasks.retry`). ``concurrency=N``: at most N runs at once over the fleet, the
        others wait ``working``, in order; with ``concurrency_key=lambda args: args["service"]``, N (default
        1) per key: one deploy per service (see :mod:`ext_tasks.flow`).
        """
        required_scopes = scope_tokens(scopes)
        if task not in ("forbidden", "optional", "required"):
            raise ValueError(f"task must be 'forbidden', 'optional' or 'required', not {task!r}")
        for label, value in (("ttl_ms", ttl_ms), ("poll_max_ms", poll_max_ms)):
            if value is not None and (not isinstance(value, int) or value <= 0):
                raise ValueError(f"{label} must be a positive integer number of milliseconds")
        for label, seconds in (("timeout_s", timeout_s), ("input_timeout_s", input_timeout_s)):
            numeric = isinstance(seconds, int | float) and not isinstance(seconds, bool)
            if seconds is not None and (not numeric or seconds <= 0):
                raise ValueError(f"{label} must be a positive number of seconds")
        if concurrency is not None and (
            isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1
        ):
            raise ValueError("concurrency must be a positive integer number of runs")
        if concurrency_key is not None and not callable(concurrency_key):
            raise ValueError("concurrency_key must be a function of the arguments")

        def register(fn: F) -> F:
            signature = Signature.of(fn, raw_schema=input_schema is not None)
            schema = dict(input_schema) if input_schema is not None else signature.json_schema()
            tool = Tool(
                name=name or fn.__name__,
                fn=fn,
                description=description or inspect.getdoc(fn) or "",
                signature=signature,
                input_schema=schema,
                raw_schema=input_schema is not None,
                title=title,
                annotations=dict(annotations) if annotations else None,
                header_params={
                    spec["x-mcp-header"]: prop
                    for prop, spec in schema.get("properties", {}).items()
                    if isinstance(spec, dict) and isinstance(spec.get("x-mcp-header"), str)
                },
                task=task,
                preflight=preflight,
                ttl_ms=ttl_ms,
                poll_max_ms=poll_max_ms,
                sensitive=sensitive,
                scopes=required_scopes,
                timeout_s=timeout_s,
                input_timeout_s=input_timeout_s,
                retention=retention,
                retry=retry,
                concurrency=concurrency if concurrency is not None or concurrency_key is None else 1,
                concurrency_key=concurrency_key,
            )
            self.add_tool(tool)
            return fn

        return register

    def prompt(
        self, name: str | None = None, *, description: str | None = None, title: str | None = None
    ) -> Callable[[F], F]:
        def register(fn: F) -> F:
            prompt = Prompt(name or fn.__name__, fn, description or inspect.getdoc(fn) or "", Signature.of(fn), title)
            self.add_prompt(prompt)
            return fn

        return register

    def resource(
        self, uri: str, *, name: str | None = None, description: str | None = None, mime_type: str | None = None
    ) -> Callable[[F], F]:
        def register(fn: F) -> F:
            resource = Resource(
                uri, fn, name or fn.__name__, description or inspect.getdoc(fn) or "", mime_type, Signature.of(fn)
            )
            self.resources[uri] = resource
            self._changed("resources")
            return fn

        return register

    def resource_template(
        self,
        uri_template: str,
        *,
        name: str | None = None,
        description: str | None = None,
        mime_type: str | None = None,
    ) -> Callable[[F], F]:
        def register(fn: F) -> F:
            template = ResourceTemplate(
                uri_template,
                fn,
                name or fn.__name__,
                description or inspect.getdoc(fn) or "",
                mime_type,
                Signature.of(fn),
                template_pattern(uri_template),
            )
            self.templates[uri_template] = template
            self._changed("resources")
            return fn

        return register

    def completion(self, ref_type: Literal["ref/prompt", "ref/resource"], ref: str) -> Callable[[Completer], Completer]:
        """Register ``async fn(argument_name, value, context_arguments) -> [values]`` for a prompt or template."""

        def register(fn: Completer) -> Completer:
            self.completers[(ref_type, ref)] = fn
            return fn

        return register

    # --- changes at run time ----------------------------------------------------------------------

    def add_tool(self, tool: Tool) -> None:
        self._add(self.tools, "tools", tool.name, tool)

    def remove_tool(self, name: str) -> Tool | None:
        return self._remove(self.tools, "tools", name)

    def add_prompt(self, prompt: Prompt) -> None:
        self._add(self.prompts, "prompts", prompt.name, prompt)

    def remove_prompt(self, name: str) -> Prompt | None:
        return self._remove(self.prompts, "prompts", name)

    def _add(self, registered: dict[str, T], kind: ChangeKind, name: str, item: T) -> None:
        registered[name] = item
        self._changed(kind)

    def _remove(self, registered: dict[str, T], kind: ChangeKind, name: str) -> T | None:
        removed = registered.pop(name, None)
        if removed is not None:
            self._changed(kind)
        return removed

    def resource_updated(self, uri: str) -> None:
        """Tell subscribers of ``uri`` that its contents changed (``notifications/resources/updated``)."""
        self._changed("resource", uri)

    def on_change(self, listener: Callable[[ChangeKind, str | None], None]) -> None:
        self._listeners.append(listener)

    def _changed(self, kind: ChangeKind, uri: str | None = None) -> None:
        for listener in self._listeners:
            listener(kind, uri)

    # --- lookups ----------------------------------------------------------------------------------

    def find_tool(self, name: str) -> Tool | None:
        """The tool registered as ``name`` (``None``: no such tool). Every lookup of a tool to call goes
        through here: a ``tools/call`` looks its tool up once (a test counts it)."""
        return self.tools.get(name)

    def find_resource(self, uri: str) -> tuple[Resource | ResourceTemplate, dict[str, str]] | None:
        resource = self.resources.get(uri)
        if resource is not None:
            return resource, {}
        for template in self.templates.values():
            variables = template.match(uri)
            if variables is not None:
                return template, variables
        return None
