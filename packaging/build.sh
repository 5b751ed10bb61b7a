#!/usr/bin/env bash
# Builds the packages of the `mcp-stdio` command that go to npm and PyPI, from
# this checkout, for this machine's platform:
#
#   packaging/build.sh BINARY OUTDIR
#
# writes into OUTDIR (made if missing; earlier packages in it removed):
#
#   mcp_stdio_cli-VERSION-*.whl             the wheel: maturin's own release build
#                                           of the cli, stripped (packaging/python)
#   mcp-stdio-VERSION.tgz                   the npm launcher      } packaging/npm/build.sh,
#   mcp-stdio-cli-PLATFORM-VERSION.tgz      the platform package  } from BINARY
#
# and prints their paths on stdout, one a line, in that order. BINARY is the
# release binary the npm package carries; the npm packages are made first,
# because maturin's build writes its own binary over target/release/mcp-stdio.
# Used by .ci/packages (which then installs and runs each) and .ci/release
# (which collects them with the crates).
#
# The tools are pinned and kept in a venv under the target folder
# (target/packages/tools): maturin for the wheel, and uv and pipx, which
# .ci/packages installs the wheel with. Needs python3 with venv, node, npm and
# cargo; reports on stderr.
set -euo pipefail

MATURIN_VERSION=1.16.0
UV_VERSION=0.13.8
PIPX_VERSION=1.18.4

if [ $# -ne 2 ]; then
    echo "usage: $0 BINARY OUTDIR" >&2
    exit 2
fi
binary=$1
out=$2
root=$(cd "$(dirname "$0")/.." && pwd)
target=${CARGO_TARGET_DIR:-$root/target}
mkdir -p "$target" "$out"
target=$(cd "$target" && pwd)
out=$(cd "$out" && pwd)
start=$(date +%s)
log() { echo "packaging [$(( $(date +%s) - start )) s]: $*" >&2; }

# --- tools: maturin, uv, pipx (pinned; kept across runs) --------------------
tools="$target/packages/tools"
want="maturin==$MATURIN_VERSION uv==$UV_VERSION pipx==$PIPX_VERSION"
have=$("$tools/bin/python" -c '
import importlib.metadata as m
print(" ".join(f"{p}=={m.version(p)}" for p in ("maturin", "uv", "pipx")))' 2>/dev/null || true)
if [ "$have" != "$want" ]; then
    log "installing $want into $tools (had: ${have:-none})"
    rm -rf "$tools"
    python3 -m venv "$tools"
    # shellcheck disable=SC2086 # one word per pinned package
    "$tools/bin/python" -m pip install --quiet --disable-pip-version-check --no-input $want >&2
fi
log "tools: $want"

rm -f "$out"/*.whl "$out"/*.tgz

# --- npm: the launcher and this platform's package, from BINARY -------------
t=$(date +%s)
npm_built=$(bash "$root/packaging/npm/build.sh" "$binary" "$out")
log "npm packages built in $(( $(date +%s) - t )) s"

# --- PyPI: the wheel ---------------------------------------------------------
t=$(date +%s)
# Wheels only, no sdist: an sdist holds the part of the workspace the cli needs,
# which its Cargo.lock does not match, so a `--locked` build of it fails.
(cd "$root/packaging/python" && "$tools/bin/maturin" build --release --locked --out "$out" >&2)
wheel=$(ls "$out"/*.whl)
log "wheel built in $(( $(date +%s) - t )) s: ${wheel##*/} ($(wc -c < "$wheel") bytes)"

echo "$wheel"
echo "$npm_built"
