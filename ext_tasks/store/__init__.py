"""Task stores: the protocols by noun (:mod:`.base`), an in-memory implementation for the single-process
default (:mod:`.memory`) and a Valkey implementation for several instances (:mod:`.valkey`), on the
Valkey connection layer (:mod:`.connection`), which the legacy session store shares."""

from .base import ExistingTask, Expired, IdempotencyClaim, Run, TaskStore, TaskStoreUnavailable

__all__ = ["ExistingTask", "Expired", "IdempotencyClaim", "Run", "TaskStore", "TaskStoreUnavailable"]
