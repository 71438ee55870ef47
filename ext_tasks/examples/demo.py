"""The demo tools served by ``ext-tasks serve`` without ``--tools``: a small release desk, after the
seeds' deploy / rollback / migrate example. ``deploy`` runs as a task when the client declares the
tasks extension (inline otherwise); deploying to production asks for confirmation first, inside the
task or through a multi round-trip request, and the rollout reports its progress as the task's
``statusMessage``. The task id is the deploy's idempotency key, so a run taken over after a crash does
not deploy twice.
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


#: Deploys already started, by idempotency key (a real desk would ask its deploy system).
_started: dict[str, str] = {}


@registry.tool(
    task="optional", description="Deploy a git ref of a service; production deploys ask for confirmation first."
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
    key = ctx.task_id or f"inline:{service}@{ref}:{environment}"
    deployment = _started.setdefault(key, f"deploy-{len(_started) + 1}")
    for step, phase in enumerate(("pulling image", "rolling out", "checking health"), start=1):
        await ctx.report_progress(step, 3, f"{service}@{ref}: {phase}")
        await asyncio.sleep(0.2)
    return f"Deployed {service}@{ref} to {environment} ({deployment})."


@registry.tool(description="Roll a service back to its previous release.")
async def rollback(service: str) -> str:
    return f"Rolled {service} back to its previous release."


@registry.tool(description="Apply pending migrations to a database and report the rows touched.")
async def migrate(database: str) -> dict[str, object]:
    if not database.isidentifier():
        raise ToolError(f"Unknown database {database!r}")
    return {"database": database, "migrationsApplied": 2, "rowsTouched": 1840}
