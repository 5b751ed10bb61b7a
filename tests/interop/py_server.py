"""An MCP server written with the Python `mcp` package (2.x), for the interop tests.

Run with the venv's python (tests/interop/setup.sh): `python py_server.py`.
It serves MCP on stdio with three tools:

- `echo(text)`: returns `text` unchanged as one text block;
- `slow(seconds)`: sleeps in 50 ms steps (so a cancel interrupts it at once),
  logging `slow cancelled after N steps` to stderr when cancelled;
- `big(bytes)`: returns a text block of exactly `bytes` ASCII bytes.

Everything but protocol goes to stderr.
"""

import sys

import anyio
from mcp.server.mcpserver import MCPServer

server = MCPServer("py-interop-server", version="1.0.0")


def log(msg: str) -> None:
    print(f"py_server: {msg}", file=sys.stderr, flush=True)


@server.tool(structured_output=False)
def echo(text: str) -> str:
    """Returns `text` unchanged."""
    return text


@server.tool(structured_output=False)
async def slow(seconds: float) -> str:
    """Sleeps `seconds` in 50 ms steps; a cancel interrupts it."""
    steps = max(1, int(seconds / 0.05))
    done = 0
    try:
        for _ in range(steps):
            await anyio.sleep(0.05)
            done += 1
    except anyio.get_cancelled_exc_class():
        log(f"slow cancelled after {done} of {steps} steps")
        raise
    return f"slept {seconds} s"


@server.tool(structured_output=False)
def big(bytes: int) -> str:  # noqa: A002 - the tool's argument name
    """Returns exactly `bytes` ASCII bytes."""
    return ("0123456789abcdef" * (bytes // 16 + 1))[:bytes]


if __name__ == "__main__":
    from importlib.metadata import version

    log(f"starting (mcp {version('mcp')})")
    server.run("stdio")
    log("stdin closed, exiting")
