// Drives one MCP server with the TypeScript SDK's stdio client through a
// session a host makes: the tools, prompts and resources listed, then a few
// tool calls. Prints one JSON document of what it saw (names and results, no
// timings), so that two runs can be compared: the sandbox tests run it with
// and without `mcp-stdio guard --sandbox npx` (cli/tests/guard_sandbox.rs).
//
// Usage: node host_session.mjs SDK_DIR [--calls JSON] -- SERVER_CMD [ARGS...]
// SDK_DIR: the @modelcontextprotocol/sdk package folder.
// JSON: a list of [tool name, arguments] pairs.

import { join } from "node:path";
import { pathToFileURL } from "node:url";

const argv = process.argv.slice(2);
const sdk = argv.shift();
let calls = [];
if (argv[0] === "--calls") {
  argv.shift();
  calls = JSON.parse(argv.shift());
}
const [dashes, command, ...args] = argv;
if (!sdk || dashes !== "--" || !command) {
  console.error("usage: node host_session.mjs SDK_DIR [--calls JSON] -- SERVER_CMD [ARGS...]");
  process.exit(2);
}
const load = (file) => import(pathToFileURL(join(sdk, "dist", "esm", "client", file)).href);
const { Client } = await load("index.js");
const { StdioClientTransport } = await load("stdio.js");

const TIMEOUT_MS = 10_000;
const transport = new StdioClientTransport({ command, args, stderr: "inherit" });
const client = new Client({ name: "host-session", version: "1.0.0" });
await client.connect(transport);
const seen = { server: client.getServerVersion()?.name };
const opts = { timeout: TIMEOUT_MS };
seen.tools = (await client.listTools(undefined, opts)).tools.map((t) => t.name);
seen.prompts = (await client.listPrompts(undefined, opts)).prompts.map((p) => p.name);
seen.resources = (await client.listResources(undefined, opts)).resources.map((r) => r.uri);
seen.calls = [];
for (const [name, a] of calls) {
  try {
    const r = await client.callTool({ name, arguments: a }, undefined, opts);
    seen.calls.push({ name, isError: !!r.isError, content: r.content });
  } catch (e) {
    seen.calls.push({ name, error: `${e?.name}: ${e?.message}` });
  }
}
await client.close();
console.log(JSON.stringify(seen));
