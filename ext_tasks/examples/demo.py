"""The demo tools served by ``ext-tasks serve`` without ``--tools``: a small release desk, after the
seeds' deploy / rollback / migrate example. Deploying to production asks for confirmation through a
multi round-trip request; everything else answers at once. (The tasks issue turns these into tasks.)
"""

from __future__ import annotations

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


@registry.tool(description="Deploy a git ref of a service; production deploys ask for confirmation first.")
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
    await ctx.report_progress(1, 2, f"rolling out {service}@{ref}")
    await ctx.report_progress(2, 2, "healthy")
    return f"Deployed {service}@{ref} to {environment}."


@registry.tool(description="Roll a service back to its previous release.")
async def rollback(service: str) -> str:
    return f"Rolled {service} back to its previous release."


@registry.tool(description="Apply pending migrations to a database and report the rows touched.")
async def migrate(database: str) -> dict[str, object]:
    if not database.isidentifier():
        raise ToolError(f"Unknown database {database!r}")
    return {"database": database, "migrationsApplied": 2, "rowsTouched": 1840}
