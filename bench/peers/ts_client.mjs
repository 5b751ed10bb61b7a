// The official TypeScript SDK's stdio client, calling the fixture's `big`
// tool: the `large` scenario of mcp-stdio-bench, in a process of its own.
//
// node ts_client.mjs --sdk SDK_DIR --server FIXTURE --bytes N --calls K
// node ts_client.mjs --sdk SDK_DIR --id-last --server BENCH_PEER --line-bytes N
//                    --trials K --wait-ms W [--max-buffer B]
//
// --id-last: the id-last scenarios instead. BENCH_PEER runs with --stamps FILE
// and answers `id_last {line_bytes}` with one line of N bytes whose id comes
// last; each call races a W ms timer, and the outcome (error, result or
// timeout) is timed from the frame's end (bench-peer's CLOCK_MONOTONIC stamp;
// process.hrtime reads the same clock on Linux). --max-buffer sets the
// transport's maxBufferSize (default 10 MiB): past it the SDK closes the
// whole connection, so a request then fails as "closed". Prints
// {"trials": [...]}; stops at the first timeout or closed connection.
//
// SDK_DIR is the installed @modelcontextprotocol/sdk package (bench/run uses
// target/interop/npm/node_modules/@modelcontextprotocol/sdk). Prints one JSON
// line: {"times_ns": [...], "growth": [...], "cpu_ns": [...], "values": {...},
// "notes": [...]}, the same shape as the Rust cases. CPU: process.cpuUsage
// (user + system, all threads) per call. Memory: VmHWM after each call minus VmRSS
// before it, the peak reset through /proc/self/clear_refs before each call.
import { existsSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { pathToFileURL } from "node:url";
import { join } from "node:path";
import { tmpdir } from "node:os";

function arg(name) {
  const i = process.argv.indexOf(name);
  if (i < 0 || i + 1 >= process.argv.length) throw new Error(`missing ${name}`);
  return process.argv[i + 1];
}

function statusBytes(field) {
  const m = readFileSync("/proc/self/status", "utf8").match(new RegExp(`^${field}:\\s+(\\d+) kB`, "m"));
  return m ? Number(m[1]) * 1024 : 0;
}

function resetPeak() {
  try { writeFileSync("/proc/self/clear_refs", "5"); } catch { /* peak then covers the process life */ }
}

const sdk = arg("--sdk");
const server = arg("--server");

const { Client } = await import(pathToFileURL(join(sdk, "dist/esm/client/index.js")).href);
const { StdioClientTransport } = await import(pathToFileURL(join(sdk, "dist/esm/client/stdio.js")).href);
const version = JSON.parse(readFileSync(join(sdk, "package.json"), "utf8")).version;

if (process.argv.includes("--id-last")) {
  await idLast();
}

// The end stamp (ns) of the n-th id_last response, once bench-peer wrote it.
async function endStamp(stamps, n) {
  const giveUp = Date.now() + 2000;
  for (;;) {
    const lines = existsSync(stamps) ? readFileSync(stamps, "utf8").split("\n") : [];
    const fields = (lines[n] ?? "").trim().split(" ");
    if (fields.length === 2) return BigInt(fields[1]);
    if (Date.now() > giveUp) return null;
    await new Promise((r) => setTimeout(r, 1));
  }
}

async function idLast() {
  const lineBytes = Number(arg("--line-bytes"));
  const trials = Number(arg("--trials"));
  const waitMs = Number(arg("--wait-ms"));
  const stamps = join(tmpdir(), `mcp-stdio-bench-stamps-ts-${process.pid}`);
  const params = { command: server, args: ["--stamps", stamps], stderr: "ignore" };
  const maxBuffer = process.argv.indexOf("--max-buffer");
  if (maxBuffer >= 0) params.maxBufferSize = Number(arg("--max-buffer"));
  const transport = new StdioClientTransport(params);
  const client = new Client({ name: "mcp-stdio-bench-ts", version: "0" });
  await client.connect(transport);
  const out = { trials: [], notes: [`@modelcontextprotocol/sdk ${version}, node ${process.version}`] };
  const ms = (a, b) => Number(a - b) / 1e6;
  for (let n = 0; n < trials; n++) {
    const sent = process.hrtime.bigint();
    let timer;
    const wait = new Promise((resolve) => { timer = setTimeout(() => resolve({ timeout: true }), waitMs); });
    // The SDK's own timeout is set far beyond the wait: the wait decides.
    const call = client
      .callTool({ name: "id_last", arguments: { line_bytes: lineBytes } }, undefined, { timeout: 600000 })
      .then((result) => ({ result }), (error) => ({ error }));
    const got = await Promise.race([call, wait]);
    const done = process.hrtime.bigint();
    clearTimeout(timer);
    const end = await endStamp(stamps, n);
    let trial;
    if (got.timeout) {
      trial = { outcome: "timeout", detail: `no answer within ${waitMs / 1000} s` };
    } else if (got.error) {
      const detail = String(got.error.message ?? got.error);
      // -32000 "Connection closed": the transport closed; every request fails.
      trial = { outcome: /Connection closed/.test(detail) ? "closed" : "error", detail };
    } else {
      const text = got.result?.content?.[0]?.text ?? "";
      trial = { outcome: "result", detail: `${text.length} bytes of text` };
    }
    if (end !== null) {
      trial.end_after_sent_ms = ms(end, sent);
      if (!got.timeout) trial.after_end_ms = ms(done, end);
    }
    out.trials.push(trial);
    if (trial.outcome === "timeout" || trial.outcome === "closed") break;
  }
  console.log(JSON.stringify(out));
  rmSync(stamps, { force: true });
  process.exit(0);
}

const bytes = Number(arg("--bytes"));
const calls = Number(arg("--calls"));

const transport = new StdioClientTransport({ command: server, args: [], stderr: "ignore" });
const client = new Client({ name: "mcp-stdio-bench-ts", version: "0" });
await client.connect(transport);

const out = { times_ns: [], growth: [], cpu_ns: [], values: {}, notes: [`@modelcontextprotocol/sdk ${version}, node ${process.version}`] };
for (let i = 0; i < calls; i++) {
  resetPeak();
  const before = statusBytes("VmRSS");
  const cpu0 = process.cpuUsage();
  const t0 = process.hrtime.bigint();
  const result = await client.callTool({ name: "big", arguments: { bytes } }, undefined, { timeout: 600000 });
  const text = result.content[0].text;
  if (text.length !== bytes) throw new Error(`got ${text.length} bytes, want ${bytes}`);
  out.times_ns.push(Number(process.hrtime.bigint() - t0));
  const cpu = process.cpuUsage(cpu0);
  out.cpu_ns.push((cpu.user + cpu.system) * 1000);
  out.growth.push(Math.max(0, statusBytes("VmHWM") - before));
}
console.log(JSON.stringify(out));
await client.close();
process.exit(0);
