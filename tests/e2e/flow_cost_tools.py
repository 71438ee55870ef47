"""Tools for the command cost of each flow-control feature (``test_flow_command_costs.py``): three task
tools whose bodies return at once (the benchmark's ``lifecycle`` task), with no gate, a counted gate and
a keyed gate, so that one server measures all three and only the gate differs."""

from __future__ import annotations

from ext_tasks import ToolRegistry

registry = ToolRegistry("flow-cost-tests", version="1.0.0")


@registry.tool(task="required", description="Returns at once (no gate).")
async def instant(label: str = "x") -> str:
    return f"done {label}"


@registry.tool(task="required", concurrency=2, description="Returns at once; at most 2 runs at once.")
async def counted(label: str = "x") -> str:
    return f"done {label}"


@registry.tool(
    task="required",
    concurrency_key=lambda args: args["service"],
    description="Returns at once; one run at a time per service.",
)
async def keyed(service: str) -> str:
    return f"deployed {service}"
