// The official TypeScript SDK's stdio client, calling the fixture's `big`
// tool: the `large` scenario of mcp-stdio-bench, in a process of its own.
//
// node ts_client.mjs --sdk SDK_DIR --server FIXTURE --bytes N --calls K
//
// SDK_DIR is the installed @modelcontextprotocol/sdk package (bench/run uses
// target/interop/npm/node_modules/@modelcontextprotocol/sdk). Prints one JSON
// line: {"times_ns": [...], "growth": [...], "cpu_ns": [...], "values": {...},
// "notes": [...]}, the same shape as the Rust cases. CPU: process.cpuUsage
// (user + system, all threads) per call. Memory: VmHWM after each call minus VmRSS
// before it, the peak reset through /proc/self/clear_refs before each call.
import { readFileSync, writeFileSync } from "node:fs";
import { pathToFileURL } from "node:url";
import { join } from "node:path";

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
const bytes = Number(arg("--bytes"));
const calls = Number(arg("--calls"));

const { Client } = await import(pathToFileURL(join(sdk, "dist/esm/client/index.js")).href);
const { StdioClientTransport } = await import(pathToFileURL(join(sdk, "dist/esm/client/stdio.js")).href);
const version = JSON.parse(readFileSync(join(sdk, "package.json"), "utf8")).version;

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
