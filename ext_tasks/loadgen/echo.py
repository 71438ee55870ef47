"""A trivial HTTP/1.1 echo for the loader's self-check: any POST answered with a fixed JSON body, on
keep-alive connections, with as little work per request as asyncio allows.

    python -m ext_tasks.loadgen.echo PORT      # prints "ready" once listening on 127.0.0.1:PORT
"""

from __future__ import annotations

import asyncio
import sys
from typing import Final

BODY: Final = b'{"jsonrpc":"2.0","id":1,"result":{}}'
RESPONSE: Final = (
    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
    + str(len(BODY)).encode()
    + b"\r\n\r\n"
    + BODY
)


async def _serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                if line[:15].lower() == b"content-length:":
                    length = int(line[15:])
            if length:
                await reader.readexactly(length)
            writer.write(RESPONSE)
    except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
        writer.close()


async def main(port: int) -> None:
    server = await asyncio.start_server(_serve, "127.0.0.1", port)
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    try:
        import uvloop
    except ImportError:
        asyncio.run(main(int(sys.argv[1])))
    else:
        uvloop.run(main(int(sys.argv[1])))
