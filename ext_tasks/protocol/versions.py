"""Protocol revisions this server speaks, as an enumerated set (never compared as strings)."""

from __future__ import annotations

from typing import Final

MODERN_2026_07_28: Final = "2026-07-28"

#: Revisions served statelessly on the modern path, newest first.
MODERN_VERSIONS: Final[tuple[str, ...]] = (MODERN_2026_07_28,)

META_PROTOCOL_VERSION: Final = "io.modelcontextprotocol/protocolVersion"
META_CLIENT_CAPABILITIES: Final = "io.modelcontextprotocol/clientCapabilities"
META_CLIENT_INFO: Final = "io.modelcontextprotocol/clientInfo"
META_LOG_LEVEL: Final = "io.modelcontextprotocol/logLevel"
META_SERVER_INFO: Final = "io.modelcontextprotocol/serverInfo"
META_SUBSCRIPTION_ID: Final = "io.modelcontextprotocol/subscriptionId"
META_RELATED_TASK: Final = "io.modelcontextprotocol/related-task"
