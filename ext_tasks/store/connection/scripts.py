"""Lua scripts with named keys and arguments.

A script declares the names of its keys and arguments; its Lua body refers to them by name (a header
binds ``local record = KEYS[1]`` and so on), and callers pass dictionaries, which are checked against
the declaration. Whatever is left over (``rest``) arrives in Lua as the table ``rest``: field/value
pairs for ``HSET``. Every key a script touches is one of its declared keys, as a Valkey Cluster
requires, and a script's keys share one hash slot (the key schema sees to that).

A script bound with a :class:`~.topology.Topology` that confirms writes is answered only once the
replicas have its effects (:meth:`~.topology.Topology.confirmed`); its first key names the slot.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from valkey.commands.core import AsyncScript

from .topology import Topology


class Script:
    def __init__(self, name: str, *, keys: Sequence[str], args: Sequence[str], body: str) -> None:
        self.name = name
        self.keys = tuple(keys)
        self.args = tuple(args)
        header = [f"local {key} = KEYS[{index}]" for index, key in enumerate(self.keys, start=1)]
        header += [f"local {arg} = ARGV[{index}]" for index, arg in enumerate(self.args, start=1)]
        header.append(f"local rest = {{unpack(ARGV, {len(self.args) + 1})}}")
        self.source = "\n".join([f"-- ext-tasks: {name}", *header, body.strip(), ""])

    def bind(self, client: Any, topology: Topology | None = None) -> BoundScript:
        """The script on ``client``; with ``topology``, confirmed by replicas when it asks for that."""
        return BoundScript(self, AsyncScript(client, self.source), topology)


class BoundScript:
    """A script registered with one client: ``await script(keys={...}, args={...}, rest=[...])``."""

    def __init__(self, script: Script, registered: AsyncScript, topology: Topology | None = None) -> None:
        self.script = script
        self._registered = registered
        self._topology = topology

    async def __call__(
        self, *, keys: Mapping[str, str], args: Mapping[str, str | int], rest: Sequence[str] = ()
    ) -> Any:
        declared = self.script
        if set(keys) != set(declared.keys) or set(args) != set(declared.args):
            raise ValueError(
                f"script {declared.name}: keys {sorted(keys)} / args {sorted(args)} do not match the "
                f"declaration {list(declared.keys)} / {list(declared.args)}"
            )
        key_list = [keys[name] for name in declared.keys]
        arg_list = [*(str(args[name]) for name in declared.args), *rest]
        if self._topology is None or not self._topology.confirms:
            return await self._registered(keys=key_list, args=arg_list)
        command: list[str | int] = ["EVALSHA", str(self._registered.sha), len(key_list), *key_list, *arg_list]
        return await self._topology.confirmed(key_list[0], *command, source=self.script.source)
