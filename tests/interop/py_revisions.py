"""Drives one MCP server with the Python `mcp` package's high-level `Client`
at a chosen protocol negotiation and prints what it saw as one JSON document,
so the same run directly and through `mcp-stdio guard` can be compared.

Usage: python py_revisions.py MODE -- SERVER_CMD [ARGS...]

MODE is the `Client`'s `mode`: `auto` (probe `server/discover`, fall back to
`initialize`), a modern version such as `2026-07-28` (pinned, no probe), or
`legacy` (the `initialize` handshake). Calls: tools/list (names) and
tools/call `echo` with a text of about 100 KB; prints the negotiated protocol
version too.
"""

import json
import sys

import anyio
from mcp.client.client import Client
from mcp.client.stdio import StdioServerParameters


async def main(mode: str, cmd: list) -> dict:
    out = {}
    params = StdioServerParameters(command=cmd[0], args=cmd[1:])
    async with Client(params, mode=mode) as client:
        out["protocol_version"] = client.session.protocol_version
        tools = await client.list_tools()
        out["tools"] = sorted(t.name for t in tools.tools)
        result = await client.call_tool("echo", {"text": "héllo \"2026\"\n" + "x" * 100_000})
        out["echo"] = result.model_dump(mode="json", exclude_none=True)
    return out


if __name__ == "__main__":
    argv = sys.argv[1:]
    if len(argv) < 3 or argv[1] != "--":
        print("usage: py_revisions.py MODE -- SERVER_CMD [ARGS...]", file=sys.stderr)
        sys.exit(2)
    print(json.dumps(anyio.run(main, argv[0], argv[2:]), sort_keys=True))
