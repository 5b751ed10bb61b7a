#!/usr/bin/env bash
# The node -e programs are JavaScript in single quotes, their `${…}` JavaScript's own.
# shellcheck disable=SC2016
# Builds the npm packages of the `mcp-stdio` command from a built binary:
#
#   packaging/npm/build.sh BINARY OUTDIR [PLATFORM]
#
# writes into OUTDIR (made if missing), with `npm pack`:
#
#   mcp-stdio-VERSION.tgz                    the `mcp-stdio` package: the Node launcher
#                                            (bin/mcp-stdio.js), one optional dependency
#                                            per platform package
#   mcp-stdio-cli-PLATFORM-VERSION.tgz       `@mcp-stdio/cli-PLATFORM`: BINARY as
#                                            bin/mcp-stdio, for that os and cpu only
#
# and prints the two paths on stdout, one a line, the launcher's first. PLATFORM
# is `<process.platform>-<process.arch>` as Node names them (linux-x64,
# linux-arm64, darwin-x64, darwin-arm64: the optional dependencies of
# mcp-stdio/package.json); it defaults to this machine's, and a BINARY built for
# another platform must name its own. VERSION is the cli crate's (from `cargo
# metadata`), written into every package.json here, so the packages always
# carry the version of the binary; a BINARY for this machine must say it in
# `--version`. On Linux the binary is packed stripped of its debug info and
# symbols (`strip`); on macOS as given (strip it at build time, e.g.
# CARGO_PROFILE_RELEASE_STRIP=symbols, which keeps its code signature valid).
# Needs node, npm and cargo; reports on stderr.
set -euo pipefail

if [ $# -lt 2 ] || [ $# -gt 3 ]; then
    echo "usage: $0 BINARY OUTDIR [PLATFORM]" >&2
    exit 2
fi
binary=$1
out=$2
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
log() { echo "npm packages: $*" >&2; }
if [ ! -f "$binary" ] || [ ! -x "$binary" ]; then
    log "$binary is not an executable file"
    exit 1
fi

host=$(node -p 'process.platform + "-" + process.arch')
platform=${3:-$host}
main_json="$here/mcp-stdio/package.json"
# Known platforms: the launcher's optional dependencies.
node -e '
const deps = require(process.argv[1]).optionalDependencies;
const want = "@mcp-stdio/cli-" + process.argv[2];
if (!(want in deps)) {
  console.error(`npm packages: ${process.argv[2]} is not a platform of mcp-stdio/package.json ` +
    `(${Object.keys(deps).map((d) => d.replace("@mcp-stdio/cli-", "")).join(", ")})`);
  process.exit(1);
}' "$main_json" "$platform"

version=$(cargo metadata --no-deps --format-version 1 --locked --manifest-path "$root/Cargo.toml" |
    node -e '
let s = ""; process.stdin.on("data", (d) => (s += d)).on("end", () => {
  const p = JSON.parse(s).packages.find((p) => p.name === "mcp-stdio-cli");
  if (!p) { console.error("npm packages: no mcp-stdio-cli package in cargo metadata"); process.exit(1); }
  console.log(p.version);
});')
if [ "$platform" = "$host" ]; then
    said=$("$binary" --version)
    [ "$said" = "mcp-stdio $version" ] ||
        { log "$binary says \`$said\`, the cli crate is $version: a stale binary?"; exit 1; }
fi

mkdir -p "$out"
out=$(cd "$out" && pwd)
stage="$out/stage"
rm -rf "$stage"
mkdir -p "$stage/mcp-stdio/bin" "$stage/cli-$platform/bin"

# The launcher package: the version, and every platform package at that version.
cp "$here/mcp-stdio/bin/mcp-stdio.js" "$stage/mcp-stdio/bin/"
cp "$root/packaging/README.md" "$stage/mcp-stdio/README.md"
node -e '
const fs = require("fs");
const [src, dst, version] = process.argv.slice(1);
const pkg = JSON.parse(fs.readFileSync(src, "utf8"));
pkg.version = version;
for (const dep of Object.keys(pkg.optionalDependencies)) pkg.optionalDependencies[dep] = version;
fs.writeFileSync(dst, JSON.stringify(pkg, null, 2) + "\n");
' "$main_json" "$stage/mcp-stdio/package.json" "$version"

# The platform package: the binary, for its os and cpu (and glibc on Linux).
cp "$binary" "$stage/cli-$platform/bin/mcp-stdio"
if [ "$(uname -s)" = Linux ] && [ "${platform%%-*}" = linux ]; then
    strip "$stage/cli-$platform/bin/mcp-stdio"
fi
chmod 0755 "$stage/cli-$platform/bin/mcp-stdio"
node -e '
const fs = require("fs");
const [dst, platform, version, main] = process.argv.slice(1);
const { license, homepage, repository } = require(main);
const [os, cpu] = platform.split("-");
const pkg = {
  name: `@mcp-stdio/cli-${platform}`,
  version,
  description: `The mcp-stdio binary for ${platform}${os === "linux" ? " (glibc)" : ""}; ` +
    "installed and run by the mcp-stdio package.",
  license,
  homepage,
  repository: { ...repository, directory: "packaging/npm" },
  os: [os],
  cpu: [cpu],
  ...(os === "linux" ? { libc: ["glibc"] } : {}),
  files: ["bin/mcp-stdio"],
  preferUnplugged: true,
};
fs.writeFileSync(dst, JSON.stringify(pkg, null, 2) + "\n");
' "$stage/cli-$platform/package.json" "$platform" "$version" \
    "$main_json"
printf '# @mcp-stdio/cli-%s\n\nThe `mcp-stdio` binary for %s. Install the `mcp-stdio` package, which runs it.\n' \
    "$platform" "$platform" > "$stage/cli-$platform/README.md"

for dir in mcp-stdio "cli-$platform"; do
    file=$(cd "$stage/$dir" && npm pack --pack-destination "$out" --loglevel=error | tail -n 1)
    log "$out/$file ($(wc -c < "$out/$file") bytes)"
    echo "$out/$file"
done
rm -rf "$stage"
