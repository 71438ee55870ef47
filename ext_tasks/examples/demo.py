"""The demo tools served by ``ext-tasks serve`` without ``--tools``: a small release desk, after the
seeds' deploy / rollback / migrate example.

* ``deploy(service, ref, environment)`` runs as a task when the client declares the tasks extension
  (inline otherwise). Its progress shows in the task's ``statusMessage``; a production deploy first
  asks for confirmation (``input_required`` inside the task). The task id is the deploy's idempotency
  key, so a run taken over after a crash continues the same deployment instead of starting another.
* ``rollback(service)`` answers at once.
* ``migrate(database)`` is a task whose result (row counts) is *sensitive*: once ``tasks/get`` has
  handed it out, the server keeps it only for a short grace period.

The "deploy system" here is an in-process dict; a real desk would call its deploy API with the key.
"""

from __future__ import annotations

import asyncio
from typing import Annotated, Literal

from pydantic import Field

from ext_tasks import Context, ToolError, ToolRegistry

registry = ToolRegistry(
    "ext-tasks-demo",
    version="0.1.0",
    instructions="A release desk: deploy a ref of a service, roll a service back, migrate a database.",
)

_CONFIRM = {
    "type": "object",
    "properties": {"confirm": {"type": "boolean", "description": "Go ahead with the production deploy"}},
    "required": ["confirm"],
}
_PHASES = ("pulling image", "rolling out", "checking health")

#: Deployments started, by idempotency key: what a real deploy API would remember for us.
_deployments: dict[str, str] = {}


def _start_deployment(key: str, service: str, ref: str) -> str:
    """Start (or find the already started) deployment for ``key``: at most one per key."""
    return _deployments.setdefault(key, f"{service}-{ref}-#{len(_deployments) + 1}")


@registry.tool(
    task="optional",
    description="Deploy a git ref of a service; production deploys ask for confirmation first.",
)
async def deploy(
    ctx: Context,
    service: Annotated[str, Field(description="Service name, e.g. billing")],
    ref: Annotated[str, Field(description="Git ref to deploy")],
    environment: Literal["staging", "production"] = "staging",
) -> str:
    if environment == "production":
        answer = await ctx.elicit("confirm", f"Deploy {service}@{ref} to production?", _CONFIRM)
        if answer.action != "accept" or not (answer.content or {}).get("confirm"):
            return f"Deploy of {service}@{ref} to production was not confirmed; nothing changed."
    # Inside a task the task id is stable across re-runs and crash recoveries: the idempotency key.
    key = ctx.task_id or f"inline:{service}@{ref}:{environment}"
    deployment = _start_deployment(key, service, ref)
    for step, phase in enumerate(_PHASES, start=1):
        await ctx.report_progress(step, len(_PHASES), f"{deployment}: {phase} ({step}/{len(_PHASES)})")
        await asyncio.sleep(0.5)
    return f"Deployed {service}@{ref} to {environment} as {deployment}."


@registry.tool(description="Roll a service back to its previous release.")
async def rollback(service: str) -> str:
    return f"Rolled {service} back to its previous release."


@registry.tool(
    task="required",
    sensitive=True,
    description="Apply pending migrations to a database; the row counts are kept only briefly once read.",
)
async def migrate(ctx: Context, database: str) -> dict[str, object]:
    if not database.isidentifier():
        raise ToolError(f"Unknown database {database!r}")
    await ctx.set_status(f"migrating {database}")
    await asyncio.sleep(0.5)
    return {"database": database, "migrationsApplied": 2, "rowsTouched": 1840}
