"""The Valkey connection layer, under the task store and the legacy session store: one
:class:`~.topology.Topology` per process and URL, in one of three shapes (:mod:`.single`,
:mod:`.sentinel`, :mod:`.cluster`) behind one protocol; the pub/sub side (:mod:`.channels`), writes the
replicas confirm (:mod:`.acks`), Lua scripts with named keys (:mod:`.scripts`), the mapping of Valkey's
failures and refusals to "store unavailable" (:mod:`.refusals`) and the deployment's health
(:mod:`.health`).

Nothing here knows tasks: the stores above give it keys and scripts. This package imports nothing of
its own on purpose, so ``from ext_tasks.store.connection.errors import ...`` (the engine's side, which
must not load valkey-py) stays light.
"""
