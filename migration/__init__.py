"""The migration shim: clients of the 2025-11-25 experimental tasks keep working against the same
engine and the same tasks as 2026-07-28 clients.

``translate`` holds the pure mapping between the two eras; ``shim`` serves the legacy session-based
protocol on top of any :class:`~migration.upstream.ModernUpstream`: this server's own engine in process,
or a remote 2026-07-28 tasks server (``ext-tasks proxy``).
"""
