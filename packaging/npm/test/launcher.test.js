// Tests of the npm launcher (mcp-stdio/bin/mcp-stdio.js) as installed: a
// node_modules with the `mcp-stdio` package and this platform's binary package,
// whose binary here is a shell script that does what each test asks (exit with
// a code, die by a signal, trap signals, report its file descriptors), so that
// what the launcher does with them can be seen. .ci/packages runs the real
// binary through the real packages. Run: node --test packaging/npm/test/
"use strict";

const assert = require("node:assert/strict");
const { spawn, spawnSync } = require("node:child_process");
const fs = require("node:fs");
const os = require("node:os");
const path = require("node:path");
const { test } = require("node:test");

const SOURCE = path.join(__dirname, "..", "mcp-stdio");
const PLATFORM = `${process.platform}-${process.arch}`;
/** Bound on each launcher run: the tests assert "promptly", not a speed. */
const TIMEOUT_MS = 10_000;

const FAKE_BINARY = `#!/bin/sh
case "$1" in
  args) shift; for a in "$@"; do printf '<%s>\\n' "$a"; done ;;
  exit) exit "$2" ;;
  die) kill -"$2" $$; sleep 5; exit 99 ;;
  fds) for fd in 0 1 2; do
         printf '%s %s %s\\n' "$fd" "$(readlink /proc/$$/fd/$fd)" "$(readlink /proc/$PPID/fd/$fd)"
       done ;;
  trap) trap 'echo TERM >&2; exit 42' TERM
        trap 'echo HUP >&2; exit 43' HUP
        trap 'echo INT >&2; exit 44' INT
        echo "ready $$"
        while :; do sleep 0.05; done ;;
esac
`;

/** A folder laid out as npm installs mcp-stdio; returns the launcher's path. */
function install({ withBinary = true, platforms } = {}) {
  const root = fs.mkdtempSync(path.join(os.tmpdir(), "mcp-stdio-launcher-"));
  const main = path.join(root, "node_modules", "mcp-stdio");
  fs.mkdirSync(path.join(main, "bin"), { recursive: true });
  fs.copyFileSync(path.join(SOURCE, "bin", "mcp-stdio.js"), path.join(main, "bin", "mcp-stdio.js"));
  const manifest = JSON.parse(fs.readFileSync(path.join(SOURCE, "package.json"), "utf8"));
  if (platforms) {
    manifest.optionalDependencies = Object.fromEntries(platforms.map((p) => [`@mcp-stdio/cli-${p}`, manifest.version]));
  }
  fs.writeFileSync(path.join(main, "package.json"), JSON.stringify(manifest));
  if (withBinary) {
    const pkg = path.join(root, "node_modules", "@mcp-stdio", `cli-${PLATFORM}`);
    fs.mkdirSync(path.join(pkg, "bin"), { recursive: true });
    fs.writeFileSync(path.join(pkg, "package.json"), JSON.stringify({ name: `@mcp-stdio/cli-${PLATFORM}`, version: manifest.version }));
    fs.writeFileSync(path.join(pkg, "bin", "mcp-stdio"), FAKE_BINARY, { mode: 0o755 });
  }
  return { root, launcher: path.join(main, "bin", "mcp-stdio.js") };
}

function run(launcher, args, env = {}) {
  const started = Date.now();
  const out = spawnSync(process.execPath, [launcher, ...args], {
    encoding: "utf8",
    timeout: TIMEOUT_MS,
    env: { ...process.env, ...env },
  });
  console.log(`launcher ${args.join(" ")}: ${Date.now() - started} ms, status ${out.status}, signal ${out.signal}`);
  return out;
}

test("passes the arguments through unchanged", () => {
  const { launcher } = install();
  const args = ["guard", "--max-frame", "64", "--", "npx", "-y", "a b", "", "--"];
  const out = run(launcher, ["args", ...args]);
  assert.equal(out.status, 0, out.stderr);
  assert.equal(out.stdout, args.map((a) => `<${a}>\n`).join(""));
});

test("exits with the binary's exit code", () => {
  const { launcher } = install();
  for (const code of [0, 1, 2, 75, 126, 127]) {
    const out = run(launcher, ["exit", String(code)]);
    assert.equal(out.signal, null);
    assert.equal(out.status, code, out.stderr);
  }
});

test("ends by the signal that ended the binary", () => {
  const { launcher } = install();
  for (const signal of ["TERM", "INT", "HUP", "KILL"]) {
    const out = run(launcher, ["die", signal]);
    assert.equal(out.signal, `SIG${signal}`, `status ${out.status}, stderr ${out.stderr}`);
  }
  // A signal whose default Node handles itself (SIGUSR1 starts its inspector): 128 + N, as a shell says.
  const out = run(launcher, ["die", "USR1"]);
  assert.equal(out.status, 128 + os.constants.signals.SIGUSR1, out.stderr);
});

for (const [signal, code] of [["SIGTERM", 42], ["SIGHUP", 43], ["SIGINT", 44]]) {
  test(`passes ${signal} on to the binary and exits as it did`, { timeout: TIMEOUT_MS }, async () => {
    const { launcher } = install();
    const child = spawn(process.execPath, [launcher, "trap"], { stdio: ["ignore", "pipe", "pipe"] });
    let stderr = "";
    child.stderr.on("data", (d) => (stderr += d));
    const exited = new Promise((resolve) => child.on("exit", (c, s) => resolve([c, s])));
    // "ready PID": the traps are set.
    const ready = await new Promise((resolve) => child.stdout.once("data", (d) => resolve(String(d))));
    const binaryPid = Number(ready.split(" ")[1]);
    const started = Date.now();
    child.kill(signal); // the launcher alone, not its process group
    const [status, sig] = await exited;
    console.log(`${signal} to the launcher: it exited ${status} (${sig}) after ${Date.now() - started} ms`);
    // Had the signal not reached it, the binary would loop on, holding the test's pipes.
    let orphan = true;
    try {
      process.kill(binaryPid, "SIGKILL");
    } catch {
      orphan = false;
    }
    assert.equal(orphan, false, "the binary outlived the launcher");
    assert.equal(sig, null);
    assert.equal(status, code, stderr);
    assert.match(stderr, new RegExp(signal.slice(3)));
  });
}

test("gives the binary its own stdin, stdout and stderr (no pipe in between)", { skip: process.platform !== "linux" && "reads /proc" }, () => {
  const { launcher } = install();
  const out = run(launcher, ["fds"]);
  assert.equal(out.status, 0, out.stderr);
  const lines = out.stdout.trim().split("\n");
  assert.equal(lines.length, 3, out.stdout);
  for (const line of lines) {
    const [fd, mine, launchers] = line.split(" ");
    assert.match(mine, /^(pipe|socket):/, `fd ${fd}: ${line}`);
    assert.equal(mine, launchers, `fd ${fd}: the binary's is the launcher's own`);
  }
});

test("names the platform and the package when the binary package is missing", () => {
  const { launcher } = install({ withBinary: false });
  const out = run(launcher, ["--version"]);
  assert.equal(out.status, 1);
  assert.match(out.stderr, new RegExp(`@mcp-stdio/cli-${PLATFORM}`));
  assert.match(out.stderr, /is not installed/);
  assert.match(out.stderr, /--omit=optional/);
});

test("names the platform when there is no binary for it", () => {
  const { launcher } = install({ platforms: ["plan9-mips"] });
  const out = run(launcher, ["--version"]);
  assert.equal(out.status, 1);
  assert.match(out.stderr, new RegExp(`no prebuilt binary for ${PLATFORM} \\(there are: plan9-mips\\)`));
  assert.match(out.stderr, /cargo install/);
});

test("MCP_STDIO_BINARY runs that binary instead", () => {
  const { root, launcher } = install({ withBinary: false });
  const other = path.join(root, "other-mcp-stdio");
  fs.writeFileSync(other, "#!/bin/sh\necho other \"$@\"\n", { mode: 0o755 });
  const out = run(launcher, ["--version"], { MCP_STDIO_BINARY: other });
  assert.equal(out.status, 0, out.stderr);
  assert.equal(out.stdout, "other --version\n");
});

test("says which binary it could not run", () => {
  const { root, launcher } = install({ withBinary: false });
  const out = run(launcher, ["--version"], { MCP_STDIO_BINARY: path.join(root, "absent") });
  assert.equal(out.status, 1);
  assert.match(out.stderr, /cannot run .*absent/);
});
