"""Hardening figures: the same measurements against two checkouts of this repository (``before``, default
3320622, and ``after``, default HEAD), to show what the hardening changed.

1. :mod:`~investigations.hardening.fig1_dropped_waits`: Valkey connections held by 60 dropped legacy
   (2025-11-25) ``tasks/result`` waits, right after the drops and up to 15 s later.
2. :mod:`~investigations.hardening.fig2_oversized_listen`: server CPU and wall time for one oversized
   ``subscriptions/listen`` (a 1,000,000-byte body of task ids by default), on Valkey or in memory.
3. :mod:`~investigations.hardening.fig3_memory`: the in-memory stores' sizes and the server's RSS after tasks and
   sessions lapse and the sweep has run (a real server through the :mod:`~investigations.hardening.fig3_server`
   launcher, which records the stores' container lengths).
4. :mod:`~investigations.hardening.fig4_stored_bytes`: what one client makes Valkey keep (before: 217690e): large
   task arguments, answers and status messages, a legacy shim-inline task's ttl, creations under a byte
   budget, and Valkey commands per task lifecycle.
5. :mod:`~investigations.hardening.fig5_buffers`: every buffer has a bound (before: 217690e): the server behind a
   client that never reads, ``ext-tasks proxy`` and the client against a hostile upstream, polls a second.
6. :mod:`~investigations.hardening.fig6_store_full`: Valkey at maxmemory while acknowledged tasks run (before:
   217690e): how many end once memory is back, the answers meanwhile, servers started during the
   episode and on an evicting Valkey.
7. :mod:`~investigations.hardening.fig7_pacing`: principal B's ``tasks/get`` median alone and while principal A
   floods 1,000-id listens from 100 connections (before: 217690e).
8. :mod:`~investigations.hardening.hostile_text`: what a hostile server's text does to the CLI's terminal (before:
   217690e), run on its own: ``python -m investigations.hardening.hostile_text``.

Run from the repository root with the dev environment's interpreter::

    .venv/bin/python -m investigations.hardening fig1
    .venv/bin/python -m investigations.hardening fig2 --store valkey      # or --store memory, --body-bytes N
    .venv/bin/python -m investigations.hardening fig3 --tasks 20000 --sessions 2000 --cycles 1
    .venv/bin/python -m investigations.hardening fig4                     # before: 217690e
    .venv/bin/python -m investigations.hardening fig5 --answer-mib 300   # before: 217690e
    .venv/bin/python -m investigations.hardening fig6                     # before: 217690e
    .venv/bin/python -m investigations.hardening fig7 --store valkey      # before: 217690e
    .venv/bin/python -m investigations.hardening.hostile_text

Each takes ``--before REV|DIR --after REV|DIR`` (a commit is extracted with ``git archive REV | tar -x``
into a temporary directory, removed afterwards unless ``--keep-checkouts``), ``--versions before after``
(which to run), ``--work DIR`` (run logs; default a new temporary directory) and ``--python`` (the
children's interpreter, default the running one).

Every child process (servers, ``keygen``, the import check) runs with its cwd a neutral run directory and
``PYTHONPATH=<checkout>:investigations/hardening``, so the checkout's ``ext_tasks`` and ``migration`` shadow the
editable install and both versions serve the same tools (:mod:`~investigations.hardening.figtools`, public API
only); :func:`~investigations.hardening.figlib.check_shadowing` checks where they import from before each
figure. Servers and valkey-server bind 127.0.0.1 on free ports, are stopped by PID and every wait is
bounded. See ``investigations/hardening/README.md``.
"""
