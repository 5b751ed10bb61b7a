#!/usr/bin/env node
// The `mcp-stdio` command of the npm package: runs the native binary that the
// platform's package (an optional dependency, `@mcp-stdio/cli-<os>-<cpu>`)
// carries. The binary gets this process's stdin, stdout and stderr themselves
// (`stdio: "inherit"`, no pipe in between): `mcp-stdio guard` must own the
// host's pipes, as its guarantees need (the server's stdout always drained,
// G1; the shutdown when the host closes stdin, G11). This process reads none
// of them. SIGINT, SIGTERM and SIGHUP are passed on to the binary, and this
// process ends as the binary did: its exit code, or the same signal.
"use strict";

const { spawn } = require("node:child_process");
const os = require("node:os");

// The platforms with a binary package: the optional dependencies, each named
// `@mcp-stdio/cli-<process.platform>-<process.arch>`.
const PACKAGES = Object.keys(require("../package.json").optionalDependencies);

// Signals passed on to the binary while it runs.
const FORWARDED = ["SIGINT", "SIGTERM", "SIGHUP"];

// Signals this process may raise on itself to end as the binary did: their
// default action ends the process, and Node handles none of them itself.
const RERAISED = new Set(["SIGINT", "SIGTERM", "SIGHUP", "SIGKILL", "SIGQUIT", "SIGALRM", "SIGUSR2"]);

function fail(message) {
  process.stderr.write(`mcp-stdio (npm launcher): ${message}\n`);
  process.exit(1);
}

function isMusl() {
  if (process.platform !== "linux" || !process.report) return false;
  const header = process.report.getReport().header;
  return !header.glibcVersionRuntime;
}

function binaryPath() {
  const fromEnv = process.env.MCP_STDIO_BINARY;
  if (fromEnv) return fromEnv;
  const platform = `${process.platform}-${process.arch}`;
  const pkg = `@mcp-stdio/cli-${platform}`;
  const other =
    "build it with Rust instead (`cargo install --locked --path cli` in a checkout of " +
    "mcp-stdio; see its README, Install) and run that `mcp-stdio`, or set " +
    "MCP_STDIO_BINARY to the path of an `mcp-stdio` binary";
  if (!PACKAGES.includes(pkg)) {
    const known = PACKAGES.map((p) => p.replace("@mcp-stdio/cli-", "")).join(", ");
    fail(`no prebuilt binary for ${platform} (there are: ${known}); ${other}`);
  }
  try {
    return require.resolve(`${pkg}/bin/mcp-stdio`);
  } catch {
    if (isMusl()) {
      fail(`no prebuilt binary for ${platform} with musl libc (the Linux binaries need glibc); ${other}`);
    }
    fail(`the package ${pkg}, which carries the binary for ${platform}, is not installed. ` +
      "It is an optional dependency of mcp-stdio: an install with --omit=optional " +
      "(or --no-optional), or node_modules copied from another platform, leaves it out. " +
      `Reinstall mcp-stdio on this machine with its optional dependencies, or ${other}`);
  }
}

const binary = binaryPath();

// The handlers are in place before the binary starts, so no signal that comes
// once it runs can end this process instead of reaching it. They run from the
// event loop, after `child` is set.
let child = null;
const forward = {};
for (const signal of FORWARDED) {
  forward[signal] = () => {
    // The binary may be gone already: its exit event is on its way.
    try {
      child.kill(signal);
    } catch {}
  };
  process.on(signal, forward[signal]);
}

child = spawn(binary, process.argv.slice(2), { stdio: "inherit" });

child.on("error", (err) => {
  fail(`cannot run ${binary}: ${err.message}`);
});

child.on("exit", (code, signal) => {
  for (const s of FORWARDED) process.removeListener(s, forward[s]);
  if (signal === null) {
    process.exit(code === null ? 1 : code);
  }
  const number = os.constants.signals[signal];
  if (RERAISED.has(signal)) {
    process.kill(process.pid, signal);
  }
  // Not raised, or still alive: end as a shell reports a death by signal.
  process.exit(128 + (number || 0));
});
