"""The Valkey task store (:class:`~.store.ValkeyTaskStore`), built of its nouns: records with their
owners' places, the run queue, per-task broadcast and claims. What the legacy session store shares of
it, the owners' places on the task store's keys, is :func:`owner_places`."""

from __future__ import annotations

from ..base import OwnerPlaces
from ..connection.topology import Topology
from .keys import KeySchema
from .places import ValkeyPlaces
from .store import ValkeyTaskStore


def owner_places(topology: Topology, prefix: str) -> OwnerPlaces:
    """The owners' places of the task store under ``prefix``: a process that keeps tasks of its own
    beside a server sharing its Valkey and prefix (the legacy shim of a proxy) counts in the same ledger."""
    return ValkeyPlaces(topology.client, KeySchema(prefix))


__all__ = ["ValkeyTaskStore", "owner_places"]
