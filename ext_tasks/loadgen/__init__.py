"""The load generator behind ``ext-tasks bench`` and ``python -m bench``: raw asyncio HTTP/1.1, one
process per loader, HDR histograms merged exactly. It speaks 2026-07-28 to any server."""
