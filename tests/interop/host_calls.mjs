// Drives one MCP server (the fixture server, usually through `mcp-stdio
// guard`) with the TypeScript SDK's stdio client, the one inside most hosts,
// through a list of tool calls. Prints one JSON document: each call's outcome
// (result text or error) and how long it took. The default calls: the server
// answers `bad_utf8_result` with bytes that are not UTF-8 inside a string,
// then an `echo` shows whether the session goes on.
//
// Usage: node host_calls.mjs SDK_DIR [--sample-as WHO] [--calls JSON|@FILE] -- SERVER_CMD [ARGS...]
// SDK_DIR: the @modelcontextprotocol/sdk package folder.
// JSON: a list of [tool name, arguments] pairs; ["__pause__", {ms}] waits
// that long between calls instead (a host that goes quiet); ["__list__", {}]
// lists the tools (every page) as {tools: [names]}. @FILE: the JSON in FILE.
// Each outcome: text (the first block's text), texts, types, meta,
// structured, is_error; or error with code and data for a JSON-RPC error.
// WHO: the client declares `sampling` and answers each
// `sampling/createMessage` with the text "sampled by WHO".

import { readFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const argv = process.argv.slice(2);
const sdk = argv.shift();
let given = null;
let sampleAs = null;
if (argv[0] === "--sample-as") {
  argv.shift();
  sampleAs = argv.shift();
}
if (argv[0] === "--calls") {
  argv.shift();
  const text = argv.shift();
  given = JSON.parse(text.startsWith("@") ? readFileSync(text.slice(1), "utf8") : text);
}
const [dashes, command, ...args] = argv;
if (!sdk || dashes !== "--" || !command) {
  console.error(
    "usage: node host_calls.mjs SDK_DIR [--sample-as WHO] [--calls JSON|@FILE] -- SERVER_CMD [ARGS...]",
  );
  process.exit(2);
}
const load = (file) => import(pathToFileURL(join(sdk, "dist", "esm", "client", file)).href);
const { Client } = await load("index.js");
const { StdioClientTransport } = await load("stdio.js");
const { CreateMessageRequestSchema } = await import(
  pathToFileURL(join(sdk, "dist", "esm", "types.js")).href
);

const CALLS = given ?? [
  ["bad_utf8_result", { id_last: false }],
  ["bad_utf8_result", { id_last: true }],
  ["bad_utf8_result", { broken: true }],
  ["echo", { text: "after" }],
];
// Each call's own bound: a hang shows as an error with its time, not a stuck test.
const TIMEOUT_MS = 3_000;

const transport = new StdioClientTransport({ command, args, stderr: "ignore" });
const client = new Client(
  { name: "host-calls", version: "1.0.0" },
  sampleAs ? { capabilities: { sampling: {} } } : undefined,
);
if (sampleAs) {
  client.setRequestHandler(CreateMessageRequestSchema, async () => ({
    role: "assistant",
    content: { type: "text", text: `sampled by ${sampleAs}` },
    model: `model-${sampleAs}`,
    stopReason: "endTurn",
  }));
}
await client.connect(transport);
const calls = [];
for (const [name, a] of CALLS) {
  if (name === "__pause__") {
    await new Promise((done) => setTimeout(done, a.ms));
    continue;
  }
  const t = performance.now();
  if (name === "__list__") {
    const tools = [];
    let cursor;
    do {
      const r = await client.listTools(cursor ? { cursor } : undefined);
      tools.push(...r.tools.map((tool) => tool.name));
      cursor = r.nextCursor;
    } while (cursor);
    calls.push({ tools, call: [name, a] });
    continue;
  }
  let outcome;
  try {
    const r = await client.callTool({ name, arguments: a }, undefined, { timeout: TIMEOUT_MS });
    const texts = (r.content ?? []).map((c) => c.text ?? null);
    outcome = {
      texts,
      types: (r.content ?? []).map((c) => c.type),
      meta: r._meta ?? null,
      structured: r.structuredContent ?? null,
      is_error: Boolean(r.isError),
    };
    if (r.isError) outcome.error = texts[0] ?? "isError";
    else outcome.text = texts[0];
  } catch (e) {
    outcome =
      typeof e?.code === "number"
        ? { error: e.message, code: e.code, data: e.data ?? null }
        : { error: `${e?.name}: ${e?.message}` };
  }
  outcome.ms = Math.round((performance.now() - t) * 1000) / 1000;
  outcome.call = [name, a];
  calls.push(outcome);
}
await client.close();
console.log(JSON.stringify({ client: "typescript sdk", calls }));
