"""Drives an MCP server with the Python `mcp` package's own stdio client (2.x),
for the interop tests (tests/src/interop.rs): a client we did not write
against our `serve`.

Usage: python py_client.py --server-stderr FILE -- SERVER_CMD [ARGS...]

Steps: initialize, tools/list, echo (short and 1 MiB), `slow` started in an
anyio task group whose scope is cancelled after --cancel-after seconds (the
SDK then sends `notifications/cancelled`), echo again (timed), leave the
session (the SDK closes the server's stdin, waits, then signals the group).
The server's stderr goes to FILE (the SDK's `errlog`); afterwards its lines
containing ` cancelled ` are read back.

Prints ONE JSON summary line on stdout; diagnostics go to stderr. Exits 0 only
when every step passed (`"ok": true`), 1 otherwise.
"""

import argparse
import json
import sys
import time
import traceback
from importlib.metadata import version

import anyio
import mcp.types
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client


def proposed_version() -> str:
    """The version `ClientSession.initialize()` proposes: the newest handshake
    version (mcp 2.x, whose LATEST_PROTOCOL_VERSION, 2026-07-28, has no
    handshake), else the latest (mcp 1.x)."""
    try:
        from mcp_types.version import LATEST_HANDSHAKE_VERSION

        return LATEST_HANDSHAKE_VERSION
    except ImportError:
        return mcp.types.LATEST_PROTOCOL_VERSION


def log(msg: str) -> None:
    print(f"py_client: {msg}", file=sys.stderr, flush=True)


def first_text(result) -> str:
    if result.is_error:
        raise RuntimeError(f"tool error: {result.content!r}"[:500])
    return result.content[0].text


async def drive(args: argparse.Namespace, summary: dict, failures: list) -> None:
    def check(cond: bool, what: str) -> None:
        if not cond:
            failures.append(what)
            log(f"FAIL: {what}")

    params = StdioServerParameters(command=args.server[0], args=args.server[1:])
    with open(args.server_stderr, "w", encoding="utf-8") as errlog:
        t_session = time.monotonic()
        async with stdio_client(params, errlog=errlog) as (read, write):
            async with ClientSession(read, write) as session:
                t = time.monotonic()
                init = await session.initialize()
                summary["initialize_ms"] = round((time.monotonic() - t) * 1000, 1)
                # What `initialize` proposed: the newest handshake version (mcp 2.x,
                # where LATEST_PROTOCOL_VERSION is 2026-07-28, which has no handshake).
                summary["requested_version"] = proposed_version()
                summary["protocol_version"] = init.protocol_version
                summary["server_name"] = init.server_info.name
                summary["instructions"] = init.instructions
                summary["server_capabilities"] = init.capabilities.model_dump(exclude_none=True)

                tools = await session.list_tools()
                summary["tools"] = sorted(t.name for t in tools.tools)
                check({"echo", "slow"} <= set(summary["tools"]), "tools/list lacks echo or slow")

                text = 'héllo "wörld"\n\t€😀'
                check(first_text(await session.call_tool("echo", {"text": text})) == text, "short echo differs")

                # 1 MiB of UTF-8 with quotes, backslashes, control and multi-byte characters.
                unit = 'a"b\\c é€😀\n\t'
                big = unit * ((1 << 20) // len(unit.encode()))
                summary["echo_big_bytes"] = len(big.encode())
                t = time.monotonic()
                got = first_text(await session.call_tool("echo", {"text": big}))
                summary["echo_1_mib_ms"] = round((time.monotonic() - t) * 1000, 1)
                check(got == big, f"1 MiB echo differs (got {len(got)} chars)")

                outcome = {"slow": "running"}

                async def run_slow() -> None:
                    try:
                        r = await session.call_tool("slow", {"seconds": args.slow_seconds})
                        outcome["slow"] = f"completed: {r.content!r}"[:200]
                    except anyio.get_cancelled_exc_class():
                        outcome["slow"] = "cancelled"
                        raise
                    except Exception as e:  # noqa: BLE001 - reported in the summary
                        outcome["slow"] = f"error: {e!r}"[:200]

                t = time.monotonic()
                async with anyio.create_task_group() as tg:
                    tg.start_soon(run_slow)
                    await anyio.sleep(args.cancel_after)
                    # Cancelling the scope cancels the in-flight call: the SDK's
                    # dispatcher then sends notifications/cancelled for its id.
                    tg.cancel_scope.cancel()
                summary["slow_cancel_returned_ms"] = round((time.monotonic() - t) * 1000, 1)
                summary["slow_outcome"] = outcome["slow"]
                check(outcome["slow"] == "cancelled", f"slow was not cancelled: {outcome['slow']}")

                t = time.monotonic()
                got = first_text(await session.call_tool("echo", {"text": "after cancel"}))
                summary["echo_after_cancel_ms"] = round((time.monotonic() - t) * 1000, 1)
                check(got == "after cancel", "echo after cancel differs")

                t = time.monotonic()
                await session.send_ping()
                summary["ping_ms"] = round((time.monotonic() - t) * 1000, 1)
            t_close = time.monotonic()
        # Leaving stdio_client closed the server's stdin and waited for its exit
        # (the SDK escalates to SIGTERM after 2 s).
        summary["session_close_ms"] = round((time.monotonic() - t_close) * 1000, 1)
        summary["session_total_ms"] = round((time.monotonic() - t_session) * 1000, 1)

    with open(args.server_stderr, encoding="utf-8", errors="replace") as f:
        lines = f.read().splitlines()
    summary["server_cancelled_lines"] = [line for line in lines if " cancelled " in line]
    check(bool(summary["server_cancelled_lines"]), "the server logged no cancel")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server-stderr", required=True, help="file for the server's stderr")
    parser.add_argument("--cancel-after", type=float, default=1.0, help="seconds before the cancel")
    parser.add_argument("--slow-seconds", type=float, default=30.0, help="duration asked of `slow`")
    parser.add_argument("server", nargs=argparse.REMAINDER, help="-- SERVER_CMD [ARGS...]")
    args = parser.parse_args()
    if args.server and args.server[0] == "--":
        args.server = args.server[1:]
    if not args.server:
        parser.error("missing -- SERVER_CMD")

    summary: dict = {"mcp_version": version("mcp"), "python": sys.version.split()[0]}
    failures: list = []
    try:
        anyio.run(drive, args, summary, failures)
    except BaseException as e:  # noqa: BLE001 - any failure ends in the summary
        traceback.print_exc(file=sys.stderr)
        failures.append(f"exception: {e!r}"[:500])
    summary["failures"] = failures
    summary["ok"] = not failures
    print(json.dumps(summary), flush=True)
    return 0 if summary["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
