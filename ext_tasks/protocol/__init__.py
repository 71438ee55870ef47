"""The protocol core: JSON-RPC envelopes, MCP 2026-07-28 wire models, the envelope checks and the
requestState codec.

Nothing in this package performs I/O or imports the rest of ``ext_tasks``: every function takes bytes,
mappings and clocks as arguments and returns values or raises a :class:`~.errors.ProtocolError`.
That keeps the rules of the protocol testable on their own, the way h11 keeps HTTP/1.1.
"""
