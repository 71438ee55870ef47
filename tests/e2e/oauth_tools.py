"""Tools for the OAuth end-to-end tests (``test_oauth.py``, ``test_oauth_clients.py``), written against the
public ``ext_tasks`` API only.

- ``echo``: answers inline (no task).
- ``whoami``: a task that answers, as JSON, the principal its tool sees on the worker that ran it (issuer,
  subject, client id, scopes) and that worker's pid.
- ``deploy``: a task needing the ``deploy:production`` scope (403 ``insufficient_scope`` without it).
- ``approve``: a task that asks ``confirm`` inside the task (answered through ``tasks/update``).
- ``sleepy``: a task that sleeps ``seconds`` (to be cancelled).
- ``greet``: inline, asks the caller's name through MRTR (``input_required`` with a ``requestState``).
"""

from __future__ import annotations

import asyncio
import json
import os

from ext_tasks import Context, ToolError, ToolRegistry

registry = ToolRegistry("oauth-e2e", version="0.0.1")

DEPLOY_SCOPE = "deploy:production"
CONFIRM_SCHEMA = {
    "type": "object",
    "properties": {"confirm": {"type": "boolean", "description": "Go ahead?"}},
    "required": ["confirm"],
}
NAME_SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string", "description": "Your name"}},
    "required": ["name"],
}


def principal_of(ctx: Context) -> dict[str, object]:
    principal = ctx.principal
    return {
        "issuer": principal.issuer,
        "subject": principal.subject,
        "client_id": principal.client_id,
        "scopes": None if principal.scopes is None else sorted(principal.scopes),
    }


@registry.tool(description="Echo `text` back, inline.")
async def echo(text: str) -> str:
    return text


@registry.tool(task="required", description="The caller as this task's tool sees it, and the pid that ran it.")
async def whoami(ctx: Context) -> str:
    await ctx.set_status(f"pid {os.getpid()}")
    return json.dumps({**principal_of(ctx), "pid": os.getpid()}, sort_keys=True)


@registry.tool(task="required", scopes=[DEPLOY_SCOPE], description="Deploy `service` to production.")
async def deploy(ctx: Context, service: str) -> str:
    await ctx.set_status(f"deploying {service}")
    return f"{service} deployed to production for {ctx.principal.subject}"


@registry.tool(task="required", description="Ask for confirmation inside the task, then finish.")
async def approve(ctx: Context, label: str) -> str:
    answer = await ctx.elicit("confirm", f"Approve {label}?", CONFIRM_SCHEMA)
    if answer.action != "accept" or not (answer.content or {}).get("confirm"):
        raise ToolError(f"{label} not approved (action {answer.action})")
    return f"{label} approved"


@registry.tool(task="required", description="Sleep for `seconds` seconds inside a task.")
async def sleepy(ctx: Context, seconds: float) -> str:
    await ctx.set_status(f"pid {os.getpid()}")
    await asyncio.sleep(max(0.0, min(seconds, 600.0)))
    return f"slept {seconds:g}s"


@registry.tool(description="Ask the caller's name (multi round-trip), then greet them.")
async def greet(ctx: Context) -> str:
    answer = await ctx.elicit("name", "What is your name?", NAME_SCHEMA)
    name = (answer.content or {}).get("name")
    if answer.action != "accept" or not isinstance(name, str):
        raise ToolError(f"no name given (action {answer.action})")
    return f"Hello, {name}!"
