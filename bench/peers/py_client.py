"""The Python `mcp` package's stdio client, calling the fixture's `big` tool:
the `large` scenario of mcp-stdio-bench, in a process of its own.

    python py_client.py --server FIXTURE --bytes N --calls K
    python py_client.py --id-last --server BENCH_PEER --line-bytes N --trials K --wait-ms W

Prints one JSON line: {"times_ns": [...], "growth": [...], "cpu_ns": [...],
"values": {...}, "notes": [...]}, the same shape as the Rust cases. CPU:
time.process_time_ns (user + system, all threads) per call. Memory: VmHWM after each
call minus VmRSS before it, the peak reset through /proc/self/clear_refs
before each call.

--id-last: the id-last scenarios instead. BENCH_PEER runs with --stamps FILE
and answers `id_last {line_bytes}` with one line of N bytes whose id comes
last; each call gets W ms (anyio.move_on_after), and the outcome (error,
result or timeout) is timed from the frame's end (bench-peer's CLOCK_MONOTONIC
stamp; time.monotonic_ns reads the same clock on Linux). Prints
{"trials": [...]}; stops at the first timeout or closed connection.
"""

import argparse
import json
import os
import re
import sys
import tempfile
import time
from importlib.metadata import version

import anyio
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client


def status_bytes(field: str) -> int:
    with open("/proc/self/status", encoding="ascii") as f:
        m = re.search(rf"^{field}:\s+(\d+) kB", f.read(), re.M)
    return int(m.group(1)) * 1024 if m else 0


def reset_peak() -> None:
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as f:
            f.write("5")
    except OSError:
        pass  # the peak then covers the process life


async def main(args: argparse.Namespace) -> dict:
    out = {
        "times_ns": [],
        "growth": [],
        "cpu_ns": [],
        "values": {},
        "notes": [f"mcp {version('mcp')}, Python {sys.version.split()[0]}"],
    }
    params = StdioServerParameters(command=args.server, args=[])
    with open(os.devnull, "w", encoding="utf-8") as devnull:
        async with stdio_client(params, errlog=devnull) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                for _ in range(args.calls):
                    reset_peak()
                    before = status_bytes("VmRSS")
                    cpu0 = time.process_time_ns()
                    t0 = time.perf_counter_ns()
                    result = await session.call_tool("big", {"bytes": args.bytes})
                    text = result.content[0].text
                    if len(text) != args.bytes:
                        raise RuntimeError(f"got {len(text)} bytes, want {args.bytes}")
                    out["times_ns"].append(time.perf_counter_ns() - t0)
                    out["cpu_ns"].append(time.process_time_ns() - cpu0)
                    out["growth"].append(max(0, status_bytes("VmHWM") - before))
                    del result, text
    return out


async def end_stamp(stamps: str, n: int) -> int | None:
    """The end stamp (ns) of the n-th id_last response, once bench-peer wrote it."""
    give_up = time.monotonic() + 2.0
    while True:
        try:
            with open(stamps, encoding="ascii") as f:
                lines = f.read().splitlines()
        except OSError:
            lines = []
        if n < len(lines) and len(lines[n].split()) == 2:
            return int(lines[n].split()[1])
        if time.monotonic() > give_up:
            return None
        await anyio.sleep(0.001)


async def id_last(args: argparse.Namespace) -> dict:
    out = {"trials": [], "notes": [f"mcp {version('mcp')}, Python {sys.version.split()[0]}"]}
    stamps = os.path.join(tempfile.gettempdir(), f"mcp-stdio-bench-stamps-py-{os.getpid()}")
    params = StdioServerParameters(command=args.server, args=["--stamps", stamps])
    try:
        with open(os.devnull, "w", encoding="utf-8") as devnull:
            async with stdio_client(params, errlog=devnull) as (read, write):
                async with ClientSession(read, write) as session:
                    await session.initialize()
                    for n in range(args.trials):
                        sent = time.monotonic_ns()
                        trial: dict = {}
                        with anyio.move_on_after(args.wait_ms / 1000) as scope:
                            try:
                                result = await session.call_tool("id_last", {"line_bytes": args.line_bytes})
                                text = result.content[0].text if result.content else ""
                                trial = {
                                    "outcome": "result",
                                    "detail": f"{len(text)} bytes of text",
                                }
                            except Exception as e:  # noqa: BLE001 - any failure is the outcome
                                closed = "closed" in str(e).lower()
                                trial = {"outcome": "closed" if closed else "error", "detail": str(e)}
                        done = time.monotonic_ns()
                        if scope.cancelled_caught:
                            trial = {"outcome": "timeout", "detail": f"no answer within {args.wait_ms / 1000:g} s"}
                        end = await end_stamp(stamps, n)
                        if end is not None:
                            trial["end_after_sent_ms"] = (end - sent) / 1e6
                            if trial["outcome"] != "timeout":
                                trial["after_end_ms"] = (done - end) / 1e6
                        out["trials"].append(trial)
                        if trial["outcome"] in ("timeout", "closed"):
                            break
    finally:
        try:
            os.remove(stamps)
        except OSError:
            pass
    return out


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--server", required=True)
    p.add_argument("--id-last", action="store_true")
    p.add_argument("--bytes", type=int)
    p.add_argument("--calls", type=int)
    p.add_argument("--line-bytes", type=int)
    p.add_argument("--trials", type=int)
    p.add_argument("--wait-ms", type=int)
    a = p.parse_args()
    print(json.dumps(anyio.run(id_last if a.id_last else main, a)), flush=True)
