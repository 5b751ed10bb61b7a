"""Drives our `serve` with the Python `mcp` package's high-level `Client` (2.x)
in three modes, for the interop tests (tests/tests/serve_interop_2026.rs):

- `mode="2026-07-28"`: the client pinned to the 2026-07-28 revision, no probe,
  every request stamped with its `_meta` (protocol version, client info and
  capabilities); a raw `server/discover` validated as a 2026 `DiscoverResult`;
- `mode="auto"`: the client probes `server/discover` and adopts 2026-07-28;
- `mode="legacy"`: the 2025-11-25 `initialize` handshake, as before.

In each: tools/list, `echo`, and `revision` (the version our handler saw).

Usage: python py_client_modern.py -- SERVER_CMD [ARGS...]

Prints ONE JSON summary line on stdout; diagnostics (and the server's stderr)
go to stderr. Exits 0 only when every step passed (`"ok": true`), 1 otherwise.
"""

import argparse
import json
import sys
import traceback
from importlib.metadata import version

import anyio
import mcp_types
from mcp import Client
from mcp.client.stdio import StdioServerParameters


def log(msg: str) -> None:
    print(f"py_client_modern: {msg}", file=sys.stderr, flush=True)


def first_text(result) -> str:
    if result.is_error:
        raise RuntimeError(f"tool error: {result.content!r}"[:500])
    return result.content[0].text


async def one_mode(params: StdioServerParameters, mode: str, summary: dict, check) -> None:
    out: dict = {}
    summary[mode] = out
    client = Client(params, mode=mode, client_info=mcp_types.Implementation(name="py-modern", version="1"))
    async with client:
        out["protocol_version"] = client.protocol_version
        if mode != "legacy":
            # What a probing client gets: validated against the 2026 schema.
            raw = await client.session.send_discover("2026-07-28")
            discover = mcp_types.DiscoverResult.model_validate(raw)
            out["supported_versions"] = discover.supported_versions
            out["discover_server_info"] = (raw.get("_meta") or {}).get("io.modelcontextprotocol/serverInfo")
            check("2026-07-28" in discover.supported_versions, f"{mode}: discover lacks 2026-07-28")
        tools = await client.list_tools()
        out["tools"] = sorted(t.name for t in tools.tools)
        check({"echo", "revision"} <= set(out["tools"]), f"{mode}: tools/list lacks echo or revision")
        text = 'héllo "2026"\n€😀'
        check(first_text(await client.call_tool("echo", {"text": text})) == text, f"{mode}: echo differs")
        out["handler_revision"] = json.loads(first_text(await client.call_tool("revision", {})))
        who = json.loads(first_text(await client.call_tool("whoami", {})))
        out["handler_client_info"] = (who or {}).get("client_info")


async def drive(args: argparse.Namespace, summary: dict, failures: list) -> None:
    def check(cond: bool, what: str) -> None:
        if not cond:
            failures.append(what)
            log(f"FAIL: {what}")

    params = StdioServerParameters(command=args.server[0], args=args.server[1:])
    for mode in ("2026-07-28", "auto", "legacy"):
        try:
            await one_mode(params, mode, summary, check)
        except Exception as e:  # noqa: BLE001 - reported in the summary
            traceback.print_exc(file=sys.stderr)
            failures.append(f"{mode}: exception: {e!r}"[:500])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
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
