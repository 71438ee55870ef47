"""Task stores: one protocol (:mod:`.base`), an in-memory implementation for the single-process default
(:mod:`.memory`) and a Valkey implementation for several instances (:mod:`.valkey`)."""

from .base import ExistingTask, Expired, IdempotencyClaim, Run, TaskStore, TaskStoreUnavailable

__all__ = ["ExistingTask", "Expired", "IdempotencyClaim", "Run", "TaskStore", "TaskStoreUnavailable"]
