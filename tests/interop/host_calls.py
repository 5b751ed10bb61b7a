"""Drives one MCP server (the fixture server, usually through `mcp-stdio
guard`) with the Python `mcp` package's stdio client, through a list of tool
calls. Prints one JSON document: each call's outcome (result text or error)
and how long it took. The default calls: the server answers
`bad_utf8_result` with bytes that are not UTF-8 inside a string, then an
`echo` shows whether the session goes on.

Usage: python host_calls.py [--sample-as WHO] [--calls JSON|@FILE] -- SERVER_CMD [ARGS...]
JSON: a list of [tool name, arguments] pairs; ["__pause__", {"ms": N}] waits
that long between calls instead (a host that goes quiet); ["__list__", {}]
lists the tools (every page) as {"tools": [names]}. @FILE: the JSON in FILE.
Each outcome: "text" (the first block's text), "texts", "types", "meta",
"structured", "is_error"; or "error" with "code" and "data" for a JSON-RPC
error.
WHO: the client declares `sampling` and answers each `sampling/createMessage`
with the text "sampled by WHO" (which session a server's request reached).
"""

import json
import sys
import time

import anyio
from mcp import types
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.shared.exceptions import MCPError

CALLS = [
    ("bad_utf8_result", {"id_last": False}),
    ("bad_utf8_result", {"id_last": True}),
    ("bad_utf8_result", {"broken": True}),
    ("echo", {"text": "after"}),
]
# Each call's own bound: a hang shows as an error with its time, not a stuck test.
TIMEOUT = 3.0


async def main(cmd: list, given: list, sample_as) -> dict:
    calls = []
    params = StdioServerParameters(command=cmd[0], args=cmd[1:])

    async def sample(_context, _params):
        return types.CreateMessageResult(
            role="assistant",
            content=types.TextContent(type="text", text=f"sampled by {sample_as}"),
            model=f"model-{sample_as}",
            stop_reason="endTurn",
        )

    sampling = sample if sample_as else None
    with open("/dev/null", "w") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write):
            async with ClientSession(read, write, sampling_callback=sampling) as session:
                await session.initialize()
                for name, args in given or CALLS:
                    if name == "__pause__":
                        await anyio.sleep(args["ms"] / 1000)
                        continue
                    t = time.monotonic()
                    if name == "__list__":
                        names, cursor = [], None
                        while True:
                            page = types.PaginatedRequestParams(cursor=cursor) if cursor else None
                            r = await session.list_tools(params=page)
                            names += [tool.name for tool in r.tools]
                            cursor = r.next_cursor
                            if not cursor:
                                break
                        calls.append({"tools": names, "call": [name, args]})
                        continue
                    try:
                        r = await session.call_tool(name, args, read_timeout_seconds=TIMEOUT)
                        texts = [getattr(c, "text", None) for c in r.content]
                        outcome = {
                            "texts": texts,
                            "types": [c.type for c in r.content],
                            "meta": r.meta,
                            "structured": r.structured_content,
                            "is_error": bool(r.is_error),
                        }
                        if r.is_error:
                            outcome["error"] = texts[0] if texts else "is_error"
                        else:
                            outcome["text"] = texts[0] if texts else None
                    except MCPError as e:
                        outcome = {"error": e.error.message, "code": e.error.code, "data": e.error.data}
                    except Exception as e:  # the outcome is what we measure
                        outcome = {"error": f"{type(e).__name__}: {e}"}
                    outcome["ms"] = round((time.monotonic() - t) * 1000, 3)
                    outcome["call"] = [name, args]
                    calls.append(outcome)
    return {"client": "python mcp", "calls": calls}


if __name__ == "__main__":
    argv = sys.argv[1:]
    given = None
    sample_as = None
    if argv[:1] == ["--sample-as"] and len(argv) > 1:
        sample_as = argv[1]
        argv = argv[2:]
    if argv[:1] == ["--calls"] and len(argv) > 1:
        given = argv[1]
        if given.startswith("@"):
            with open(given[1:]) as f:
                given = f.read()
        given = json.loads(given)
        argv = argv[2:]
    if argv and argv[0] == "--":
        argv = argv[1:]
    if not argv:
        print(
            "usage: host_calls.py [--sample-as WHO] [--calls JSON|@FILE] -- SERVER_CMD [ARGS...]",
            file=sys.stderr,
        )
        sys.exit(2)
    print(json.dumps(anyio.run(main, argv, given, sample_as), sort_keys=True))
