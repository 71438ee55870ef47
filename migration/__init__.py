"""Migration shim for 2025-11-25 experimental-task clients (issue 4); empty for now."""
