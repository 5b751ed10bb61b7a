#!/usr/bin/env bash
# Installs the MCP peers the interop tests run against (tests/src/interop.rs),
# pinned exactly, into a cache folder:
#
#   $MCP_STDIO_INTEROP_DIR/npm   @modelcontextprotocol/server-everything and
#                                @modelcontextprotocol/server-filesystem (npm)
#   $MCP_STDIO_INTEROP_DIR/venv  a Python venv with the `mcp` package and
#                                `opentelemetry-proto` (PyPI: the OTLP
#                                receiver `guard --otel` is tested against)
#   tmux                         where missing (Debian's package, as root):
#                                the terminal `mcp-stdio top` is tested in
#
# MCP_STDIO_INTEROP_DIR defaults to <repo>/target/interop, where the tests look
# when MCP_STDIO_SERVER_EVERYTHING / MCP_STDIO_PYTHON are not set.
# Idempotent: a peer already installed at the pinned version is left alone.
# Needs node + npm and python3 (with venv); reports on stderr.
set -euo pipefail

SERVER_EVERYTHING_VERSION=2026.8.31
SERVER_FILESYSTEM_VERSION=2026.8.31
MCP_PY_VERSION=2.3.0
OTEL_PROTO_VERSION=1.45.2

root=$(cd "$(dirname "$0")/../.." && pwd)
dir=${MCP_STDIO_INTEROP_DIR:-$root/target/interop}
python=${MCP_STDIO_SETUP_PYTHON:-python3}
log() { echo "interop setup: $*" >&2; }
start=$(date +%s)
mkdir -p "$dir"

# --- @modelcontextprotocol/server-everything and server-filesystem ---------
# Installs one npm package at its pinned version into $dir/npm unless it is there.
npm_peer() {
    local name=$1 version=$2
    local pkg="$dir/npm/node_modules/$name"
    local have
    have=$(node -p "require(process.argv[1]).version" "$pkg/package.json" 2>/dev/null || true)
    if [ "$have" = "$version" ]; then
        log "$name $have already in $dir/npm"
    else
        command -v node >/dev/null || { log "node not found (install Node.js >= 18)"; exit 1; }
        command -v npm >/dev/null || { log "npm not found"; exit 1; }
        log "installing $name@$version into $dir/npm (had: ${have:-none})"
        local t
        t=$(date +%s)
        mkdir -p "$dir/npm"
        npm install --prefix "$dir/npm" --no-audit --no-fund --loglevel=error \
            "$name@$version" >&2
        log "npm install took $(( $(date +%s) - t )) s"
    fi
    test -f "$pkg/dist/index.js" || { log "missing $pkg/dist/index.js after install"; exit 1; }
}
npm_peer @modelcontextprotocol/server-everything "$SERVER_EVERYTHING_VERSION"
npm_peer @modelcontextprotocol/server-filesystem "$SERVER_FILESYSTEM_VERSION"

# --- Python venv with mcp ---------------------------------------------------
venv="$dir/venv"
have=$("$venv/bin/python" -c "import importlib.metadata as m; print(m.version('mcp'))" 2>/dev/null || true)
if [ "$have" = "$MCP_PY_VERSION" ]; then
    log "python mcp $have already in $venv"
else
    t=$(date +%s)
    if ! "$venv/bin/python" -c "" 2>/dev/null; then
        command -v "$python" >/dev/null || { log "$python not found (install Python >= 3.10)"; exit 1; }
        log "creating venv $venv with $("$python" --version 2>&1)"
        rm -rf "$venv"
        "$python" -m venv "$venv"
    fi
    log "installing mcp==$MCP_PY_VERSION into $venv (had: ${have:-none})"
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-input \
        "mcp==$MCP_PY_VERSION" >&2
    log "venv + pip install took $(( $(date +%s) - t )) s"
fi

have=$("$venv/bin/python" -c "import importlib.metadata as m; print(m.version('opentelemetry-proto'))" 2>/dev/null || true)
if [ "$have" = "$OTEL_PROTO_VERSION" ]; then
    log "python opentelemetry-proto $have already in $venv"
else
    t=$(date +%s)
    log "installing opentelemetry-proto==$OTEL_PROTO_VERSION into $venv (had: ${have:-none})"
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-input \
        "opentelemetry-proto==$OTEL_PROTO_VERSION" >&2
    log "pip install took $(( $(date +%s) - t )) s"
fi

# --- tmux, the terminal `mcp-stdio top`'s test runs in (Debian's package) ---
if ! command -v tmux >/dev/null; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        t=$(date +%s)
        log "installing tmux (apt-get)"
        apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq tmux >&2
        log "tmux installed in $(( $(date +%s) - t )) s"
    else
        log "tmux not found: install it (the \`mcp-stdio top\` test needs it)"
        exit 1
    fi
fi

log "ready in $(( $(date +%s) - start )) s: $(tmux -V), node $(node --version), server-everything $SERVER_EVERYTHING_VERSION, server-filesystem $SERVER_FILESYSTEM_VERSION, $("$venv/bin/python" --version 2>&1), mcp $MCP_PY_VERSION, opentelemetry-proto $OTEL_PROTO_VERSION"
