"""Peer servers, run by the benchmark in their own virtualenvs (``.venvs/bench-*``).

These scripts import packages that are not installed in the project's environment (``mcp``,
``fastmcp``), so they are excluded from mypy and never imported by the benchmark itself: they are
started as ``<venv>/bin/python bench/peers/<script>.py``.
"""
