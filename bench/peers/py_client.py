"""The Python `mcp` package's stdio client, calling the fixture's `big` tool:
the `large` scenario of mcp-stdio-bench, in a process of its own.

    python py_client.py --server FIXTURE --bytes N --calls K

Prints one JSON line: {"times_ns": [...], "growth": [...], "cpu_ns": [...],
"values": {...}, "notes": [...]}, the same shape as the Rust cases. CPU:
time.process_time_ns (user + system, all threads) per call. Memory: VmHWM after each
call minus VmRSS before it, the peak reset through /proc/self/clear_refs
before each call.
"""

import argparse
import json
import os
import re
import sys
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


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--server", required=True)
    p.add_argument("--bytes", type=int, required=True)
    p.add_argument("--calls", type=int, required=True)
    print(json.dumps(anyio.run(main, p.parse_args())), flush=True)
