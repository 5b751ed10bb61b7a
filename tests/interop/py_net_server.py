"""An MCP server written with the Python `mcp` package (2.x) that tries the network,
for the sandbox tests (cli/tests/guard_sandbox.rs).

Run with the venv's python (tests/interop/setup.sh): `python py_net_server.py`.
One tool:

- `connect(port)`: opens a TCP connection to 127.0.0.1:`port` and returns
  `connected`, or `refused: ` and the error the system gave.

Everything but protocol goes to stderr.
"""

import socket

from mcp.server.mcpserver import MCPServer

server = MCPServer("py-net-server", version="1.0.0")


@server.tool(structured_output=False)
def connect(port: int) -> str:
    """Opens a TCP connection to 127.0.0.1:`port`."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            return "connected"
    except OSError as e:
        return f"refused: {e}"


if __name__ == "__main__":
    server.run("stdio")
