"""Drives one MCP server with the Python `mcp` package's stdio client and
prints the results of a fixed sequence of calls as one JSON document, so the
same sequence run directly and through `mcp-stdio guard` can be compared
(the guard must be transparent for a well-behaved server).

Usage: python py_transparency.py -- SERVER_CMD [ARGS...]

Calls: initialize (protocol version, server name), tools/list (names),
prompts/list (names), resources/list (URIs), and tool calls with fixed
arguments: echo, get-sum, get-structured-content, get-annotated-message,
get-tiny-image (each only if listed). Volatile fields are left out.
"""

import json
import sys

import anyio
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

CALLS = [
    ("echo", {"message": "héllo \"guard\"\n\t" + "x" * 100_000}),
    ("get-sum", {"a": 40, "b": 2}),
    ("get-structured-content", {"location": "New York"}),
    ("get-annotated-message", {"messageType": "error", "includeImage": True}),
    ("get-tiny-image", {}),
]


async def main(cmd: list) -> dict:
    out = {}
    params = StdioServerParameters(command=cmd[0], args=cmd[1:])
    with open("/dev/null", "w") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write):
            async with ClientSession(read, write) as session:
                init = await session.initialize()
                out["protocol_version"] = init.protocol_version
                out["server_name"] = init.server_info.name
                tools = sorted(t.name for t in (await session.list_tools()).tools)
                out["tools"] = tools
                out["prompts"] = sorted(p.name for p in (await session.list_prompts()).prompts)
                out["resources"] = sorted(str(r.uri) for r in (await session.list_resources()).resources)
                results = {}
                for name, args in CALLS:
                    if name in tools:
                        r = await session.call_tool(name, args)
                        results[name] = r.model_dump(mode="json", exclude_none=True)
                out["calls"] = results
    return out


if __name__ == "__main__":
    argv = sys.argv[1:]
    if argv and argv[0] == "--":
        argv = argv[1:]
    if not argv:
        print("usage: py_transparency.py -- SERVER_CMD [ARGS...]", file=sys.stderr)
        sys.exit(2)
    print(json.dumps(anyio.run(main, argv), sort_keys=True))
