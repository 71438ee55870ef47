"""``python -m investigations.hardening fig1|...|fig7 [options]``: see :mod:`investigations.hardening`."""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence

from . import (
    fig1_dropped_waits,
    fig2_oversized_listen,
    fig3_memory,
    fig4_stored_bytes,
    fig5_buffers,
    fig6_store_full,
    fig7_pacing,
)

FIGURES: dict[str, Callable[[Sequence[str] | None], int]] = {
    "fig1": fig1_dropped_waits.main,
    "fig2": fig2_oversized_listen.main,
    "fig3": fig3_memory.main,
    "fig4": fig4_stored_bytes.main,
    "fig5": fig5_buffers.main,
    "fig6": fig6_store_full.main,
    "fig7": fig7_pacing.main,
}


def main(argv: Sequence[str]) -> int:
    if not argv or argv[0] not in FIGURES:
        print(
            f"usage: python -m investigations.hardening {{{'|'.join(FIGURES)}}} [options]  (--help after one)",
            file=sys.stderr,
        )
        return 2
    return FIGURES[argv[0]](argv[1:])


raise SystemExit(main(sys.argv[1:]))
