"""The Python SDK 2.3.0 server (``mcp==2.3.0``) with a tool equivalent to ``bench.tools.ask_once``.

``ask_once`` answers ``InputRequiredResult`` with one elicitation and a request state on the first
round, and completes on the retry that carries the answer. The SDK's ``RequestStateBoundary`` seals
the state (AES-256-GCM) with a shared key ring (``--key``), exactly as a multi-instance deployment
must configure it, and verifies it on the retry. The tool returns the ``InputRequiredResult`` itself
(the SDK's lowest-overhead MRTR path; ``Resolve``/``Elicit`` dependencies add work on top).

Served stateless, JSON responses, by uvicorn (the server ``MCPServer.run`` uses), with uvloop and
httptools when installed, no access log.

    python bench/peers/sdk_server.py --port 8001 --key <64 hex chars>
"""

from __future__ import annotations

import argparse

import mcp_types as types
import uvicorn
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.request_state import RequestStateSecurity


def build(key: bytes) -> MCPServer:
    server = MCPServer(
        "ext-tasks-bench-sdk",
        request_state_security=RequestStateSecurity(keys=[key]),
        log_level="WARNING",
    )

    @server.tool(description="Asks once for confirmation, completes on the retry")
    async def ask_once(ctx: Context, item: str = "x") -> types.CallToolResult | types.InputRequiredResult:
        answers = ctx.input_responses
        if answers is None or "confirm" not in answers:
            return types.InputRequiredResult(
                input_requests={
                    "confirm": types.ElicitRequest(
                        params=types.ElicitRequestFormParams(
                            message=f"Proceed with {item}?",
                            requested_schema={
                                "type": "object",
                                "properties": {"confirm": {"type": "boolean"}},
                                "required": ["confirm"],
                            },
                        )
                    )
                },
                request_state=f"asked:{item}",
            )
        action = getattr(answers["confirm"], "action", "accept")
        return types.CallToolResult(content=[types.TextContent(type="text", text=f"{item}: {action}")])

    return server


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--key", required=True, help="hex request-state key shared by every instance")
    args = parser.parse_args()
    app = build(bytes.fromhex(args.key)).streamable_http_app(stateless_http=True, json_response=True, host=args.host)
    options: dict[str, object] = {"access_log": False, "log_level": "warning"}
    try:
        import uvloop  # noqa: F401

        options["loop"] = "uvloop"
    except ImportError:
        pass
    try:
        import httptools  # noqa: F401

        options["http"] = "httptools"
    except ImportError:
        pass
    uvicorn.run(app, host=args.host, port=args.port, **options)  # type: ignore[arg-type]


if __name__ == "__main__":
    main()
