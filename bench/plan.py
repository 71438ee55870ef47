"""What one run measures: server *stacks* (what is started) and the *steps* (workload x concurrency)
run against each, in one round. Every round visits every stack, in a rotated order.

Stacks of the ``main`` group are pinned (server on CPU 1; loader and valkey-server on CPU 0), as
performance.md recommends for one-process servers. The ``scaling`` group runs 1 and 2 server
processes unpinned ("whole box": servers, loader and Valkey share both cores), each against its own
echo baseline with the same placement, since pinned and unpinned figures must never be compared.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Final, Literal

Kind = Literal["echo", "ext", "sdk", "fastmcp"]
Server = Literal["hypercorn", "granian", "uvicorn"]
Store = Literal["memory", "valkey", "valkey-cluster", "valkey-replica"]
Placement = Literal["pinned", "box"]

#: Workloads and the families ``--only`` selects.
WORKLOADS: Final = ("echo", "echo_wrk", "mrtr", "replay", "lifecycle", "lifecycle_input", "tasks_get")
FAMILIES: Final[dict[str, tuple[str, ...]]] = {
    "mrtr": ("mrtr", "replay"),
    "polling": ("tasks_get",),
    "tasks_get": ("tasks_get",),
    # What OAuth costs: the OAuth stacks' steps, and the same steps of the stacks without it.
    "auth": ("replay", "tasks_get"),
    "lifecycle": ("lifecycle", "lifecycle_input"),
    "scaling": ("mrtr", "replay", "tasks_get", "lifecycle", "lifecycle_input"),
}
#: Steps run in this order on one server start: the tasks/get population's ``hold`` tasks occupy the
#: task workers, so tasks/get comes last.
ORDER: Final = {name: index for index, name in enumerate(WORKLOADS)}

TOOLS: Final[dict[str, str]] = {
    "mrtr": "ask_once",
    "replay": "ask_once",
    "lifecycle": "instant",
    "lifecycle_input": "ask_in_task",
}

DESCRIPTIONS: Final[dict[str, str]] = {
    "echo": "Litestar JSON echo (`POST /echo`), requests/s",
    "echo_wrk": "the same echo driven by wrk (loader cross-check)",
    "mrtr": "MRTR round trips: `tools/call` -> `input_required` -> retry -> `complete`",
    "replay": "MRTR resumes only (the completing retry, state verified each time)",
    "tasks_get": "`tasks/get` over a population of working and completed tasks",
    "lifecycle": "task create -> complete (instant body), polled with `tasks/get`",
    "lifecycle_input": "task create -> input_required -> `tasks/update` -> complete",
}


@dataclass(frozen=True)
class Step:
    workload: str
    concurrency: int

    @property
    def key(self) -> str:
        return f"{self.workload}@c{self.concurrency}"


@dataclass(frozen=True)
class Stack:
    key: str
    label: str
    kind: Kind
    server: Server
    store: Store | None
    procs: int
    placement: Placement
    group: Literal["main", "scaling"]
    #: The echo stack whose same-round figures this stack's ratios use.
    baseline: str | None
    steps: tuple[Step, ...] = field(default=())
    #: Extra environment of the stack's server processes (name, value).
    env: tuple[tuple[str, str], ...] = ()
    #: OAuth on: the runner starts a local issuer, configures the server for it and gives the loader a
    #: token (the stack without OAuth it is compared with is ``OAUTH_STACKS[key]``).
    oauth: bool = False

    @property
    def is_peer(self) -> bool:
        return self.kind in ("sdk", "fastmcp")


@dataclass(frozen=True)
class Shape:
    """How long and how hard: the concurrency levels and the size of the tasks/get population."""

    mrtr_levels: tuple[int, ...]
    lifecycle_levels: tuple[int, ...]
    saturate: int
    population: int
    scaling_saturate: int


#: The server setting the replica stacks differ by: ``WAIT N`` after every task creation and commit.
MIN_REPLICA_ACKS: Final = "EXT_TASKS_VALKEY_MIN_REPLICA_ACKS"
#: The stacks measuring replica acknowledgement (no WAIT, WAIT 1), on a primary with one replica.
REPLICA_STACKS: Final = ("ext-hc-vkr0", "ext-hc-vkr1")

#: The stacks with OAuth on, each with the stack it is the same as but for OAuth (ratios taken per round).
OAUTH_STACKS: Final = {"ext-hc-mem-oauth": "ext-hc-mem", "ext-hc-vk-oauth": "ext-hc-vk"}

FULL = Shape(mrtr_levels=(1, 16, 64), lifecycle_levels=(1, 16), saturate=64, population=200, scaling_saturate=64)
SMOKE = Shape(mrtr_levels=(4,), lifecycle_levels=(4,), saturate=4, population=6, scaling_saturate=4)


def _steps(workloads: dict[str, tuple[int, ...]]) -> tuple[Step, ...]:
    steps = [Step(name, level) for name, levels in workloads.items() for level in levels]
    return tuple(sorted(steps, key=lambda step: (ORDER[step.workload], step.concurrency)))


def build_plan(
    shape: Shape, *, smoke: bool, peers: bool, wrk: bool, only: str | None, keys: Collection[str] | None = None
) -> list[Stack]:
    """The stacks of one round, each with its steps, after ``--only`` (baselines follow what remains) and,
    when ``keys`` is given (``--stacks``), only the stacks named there, echo baselines included."""
    sat = (shape.saturate,)
    full_ext = {
        "mrtr": shape.mrtr_levels,
        "replay": sat,
        "lifecycle": shape.lifecycle_levels,
        "lifecycle_input": shape.lifecycle_levels,
        "tasks_get": sat,
    }
    stacks: list[Stack] = [
        Stack("ext-hc-mem", "ext-tasks, hypercorn, in-memory", "ext", "hypercorn", "memory", 1, "pinned", "main",
              "echo-hc", _steps(full_ext)),
        Stack("ext-hc-vk", "ext-tasks, hypercorn, Valkey", "ext", "hypercorn", "valkey", 1, "pinned", "main",
              "echo-hc", _steps(full_ext)),
        Stack("ext-hc-vkc", "ext-tasks, hypercorn, Valkey Cluster (3 primaries)", "ext", "hypercorn",
              "valkey-cluster", 1, "pinned", "main", "echo-hc", _steps(full_ext)),
    ]  # fmt: skip
    oauth_steps = _steps({"replay": sat, "tasks_get": sat})
    stacks += [
        Stack("ext-hc-mem-oauth", "ext-tasks, hypercorn, in-memory, OAuth", "ext", "hypercorn", "memory", 1, "pinned",
              "main", "echo-hc", _steps({"replay": sat}) if smoke else oauth_steps, oauth=True),
        Stack("ext-hc-vk-oauth", "ext-tasks, hypercorn, Valkey, OAuth", "ext", "hypercorn", "valkey", 1, "pinned",
              "main", "echo-hc", oauth_steps, oauth=True),
    ]  # fmt: skip
    if smoke:  # one OAuth stack, one step: a few seconds
        stacks = [stack for stack in stacks if stack.key != "ext-hc-vk-oauth"]
    replica_steps = _steps({"lifecycle": shape.lifecycle_levels, "tasks_get": sat})
    stacks += [
        Stack(key, f"ext-tasks, hypercorn, Valkey primary + 1 replica, {what}", "ext", "hypercorn", "valkey-replica",
              1, "pinned", "main", "echo-hc", replica_steps, env=((MIN_REPLICA_ACKS, str(acks)),))
        for key, acks, what in zip(REPLICA_STACKS, (0, 1), ("no WAIT", "WAIT 1 after every write"), strict=True)
    ]  # fmt: skip
    if smoke:
        stacks.append(
            Stack("ext-gr-mem", "ext-tasks, granian, in-memory", "ext", "granian", "memory", 1, "pinned", "main",
                  "echo-gr", _steps({"replay": sat}))
        )  # fmt: skip
    else:
        stacks += [
            Stack("ext-gr-mem", "ext-tasks, granian, in-memory", "ext", "granian", "memory", 1, "pinned", "main",
                  "echo-gr", _steps({"mrtr": shape.mrtr_levels, "replay": sat, "tasks_get": sat})),
            Stack("ext-gr-vk", "ext-tasks, granian, Valkey", "ext", "granian", "valkey", 1, "pinned", "main",
                  "echo-gr", _steps({"replay": sat, "lifecycle": shape.lifecycle_levels, "tasks_get": sat})),
        ]  # fmt: skip
    if peers:
        stacks += [
            Stack("sdk", "Python SDK mcp 2.3.0, uvicorn (uvloop, httptools)", "sdk", "uvicorn", None, 1, "pinned",
                  "main", "echo-hc", _steps({"mrtr": shape.mrtr_levels, "replay": sat})),
            Stack("sdk-hc", "Python SDK mcp 2.3.0, hypercorn (configured as ext-tasks serve)", "sdk", "hypercorn",
                  None, 1, "pinned", "main", "echo-hc", _steps({"mrtr": shape.mrtr_levels, "replay": sat})),
            Stack("fastmcp-vk", "FastMCP 4.1.4 tasks, uvicorn, Valkey", "fastmcp", "uvicorn", "valkey", 1, "pinned",
                  "main", "echo-hc",
                  _steps({"lifecycle": shape.lifecycle_levels, "lifecycle_input": shape.lifecycle_levels,
                          "tasks_get": sat})),
        ]  # fmt: skip
    scaling_sat = (shape.scaling_saturate,)
    scaling_steps = (
        _steps({"tasks_get": scaling_sat})
        if smoke
        else _steps({"replay": scaling_sat, "lifecycle": (16,), "tasks_get": scaling_sat})
    )
    stacks += [
        Stack("ext-hc-vk-box1", "ext-tasks, hypercorn, Valkey, 1 process (whole box)", "ext", "hypercorn", "valkey",
              1, "box", "scaling", "echo-hc-box1", scaling_steps),
        Stack("ext-hc-vk-box2", "ext-tasks, hypercorn, Valkey, 2 processes (whole box)", "ext", "hypercorn", "valkey",
              2, "box", "scaling", "echo-hc-box2", scaling_steps),
    ]  # fmt: skip
    stacks = _only(stacks, only)
    if keys is None:
        return _with_baselines(stacks, wrk=wrk and not smoke)
    chosen = _with_baselines([stack for stack in stacks if stack.key in keys], wrk=wrk and not smoke)
    return [stack for stack in chosen if stack.key in keys]


def stack_keys() -> list[str]:
    """Every stack a run can have (``--stacks`` picks among them): the full plan with peers and wrk."""
    return [stack.key for stack in build_plan(FULL, smoke=False, peers=True, wrk=True, only=None)]


def _only(stacks: list[Stack], only: str | None) -> list[Stack]:
    """Keep the steps of one workload family (``scaling``: the scaling group's stacks, all their steps)."""
    if only is None:
        return stacks
    if only == "scaling":
        return [stack for stack in stacks if stack.group == "scaling"]
    family = FAMILIES[only]
    kept = []
    for stack in stacks:
        steps = tuple(step for step in stack.steps if step.workload in family)
        if steps:
            kept.append(dataclasses.replace(stack, steps=steps))
    return kept


ECHO_STACKS: Final[dict[str, tuple[str, Server, int, Placement, Literal["main", "scaling"]]]] = {
    "echo-hc": ("Litestar echo, hypercorn", "hypercorn", 1, "pinned", "main"),
    "echo-gr": ("Litestar echo, granian", "granian", 1, "pinned", "main"),
    "echo-hc-box1": ("Litestar echo, hypercorn, 1 process (whole box)", "hypercorn", 1, "box", "scaling"),
    "echo-hc-box2": ("Litestar echo, hypercorn, 2 processes (whole box)", "hypercorn", 2, "box", "scaling"),
}


def _with_baselines(stacks: list[Stack], *, wrk: bool) -> list[Stack]:
    """Add each needed echo stack, measured at every concurrency its dependants use."""
    levels: dict[str, set[int]] = {}
    for stack in stacks:
        if stack.baseline is not None:
            levels.setdefault(stack.baseline, set()).update(step.concurrency for step in stack.steps)
    echoes = []
    for key, (label, server, procs, placement, group) in ECHO_STACKS.items():
        if key not in levels:
            continue
        steps = [Step("echo", level) for level in sorted(levels[key])]
        if wrk and key == "echo-hc":
            steps.append(Step("echo_wrk", max(levels[key])))
        echoes.append(Stack(key, label, "echo", server, None, procs, placement, group, None, _steps_sorted(steps)))
    return echoes + stacks


def _steps_sorted(steps: list[Step]) -> tuple[Step, ...]:
    return tuple(sorted(steps, key=lambda step: (ORDER[step.workload], step.concurrency)))
