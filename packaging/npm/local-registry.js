#!/usr/bin/env node
// A package registry on the loopback address that serves the npm packages
// `packaging/npm/build.sh` made, so that the published install path can be
// tested without publishing: `npx -y mcp-stdio`, `npm install -g mcp-stdio`,
// with npm choosing the platform package among the optional dependencies by
// their os, cpu and libc, as it does from the public registry.
//
//   node packaging/npm/local-registry.js TGZ...
//
// prints `http://127.0.0.1:PORT/` on stdout once it listens, then serves each
// package's document and tarball. A platform package named in the launcher's
// optionalDependencies without a tarball here (the other platforms: only this
// machine's binary is built) gets a document whose tarball is absent (404): npm
// never fetches it unless its os/cpu/libc fields would let it install here.
// Every request is logged on stderr. It stops on SIGTERM/SIGINT, or by itself
// after LIFETIME_MS.
"use strict";

const crypto = require("node:crypto");
const fs = require("node:fs");
const http = require("node:http");
const path = require("node:path");
const zlib = require("node:zlib");

/** The longest this registry runs, whatever happens to the script that started it. */
const LIFETIME_MS = 10 * 60 * 1000;
/** The largest tarball served (the binary packages are a few MiB). */
const MAX_TGZ_BYTES = 256 * 1024 * 1024;

/** `package/package.json` out of a .tgz made by `npm pack` (a gzipped ustar archive). */
function manifestOf(tgz) {
  const tar = zlib.gunzipSync(tgz);
  for (let at = 0; at + 512 <= tar.length; ) {
    const header = tar.subarray(at, at + 512);
    const name = header.subarray(0, 100).toString("utf8").replace(/\0.*$/s, "");
    if (name === "") break;
    const size = parseInt(header.subarray(124, 136).toString("ascii").replace(/\0.*$/s, "").trim() || "0", 8);
    if (name === "package/package.json") {
      return JSON.parse(tar.subarray(at + 512, at + 512 + size).toString("utf8"));
    }
    at += 512 + Math.ceil(size / 512) * 512;
  }
  throw new Error("no package/package.json in the archive");
}

const files = process.argv.slice(2);
if (files.length === 0) {
  process.stderr.write("usage: local-registry.js TGZ...\n");
  process.exit(2);
}

const tarballs = new Map(); // URL path -> bytes
const packuments = new Map(); // package name -> document, filled once the port is known
const entries = [];
for (const file of files) {
  if (fs.statSync(file).size > MAX_TGZ_BYTES) throw new Error(`${file}: larger than ${MAX_TGZ_BYTES} bytes`);
  const bytes = fs.readFileSync(file);
  entries.push({ manifest: manifestOf(bytes), bytes, file: path.basename(file) });
}

function document(base, manifest, tarballPath, bytes) {
  const dist = { tarball: base + tarballPath.slice(1) };
  if (bytes) {
    dist.integrity = "sha512-" + crypto.createHash("sha512").update(bytes).digest("base64");
    dist.shasum = crypto.createHash("sha1").update(bytes).digest("hex");
  }
  return {
    name: manifest.name,
    "dist-tags": { latest: manifest.version },
    versions: { [manifest.version]: { ...manifest, _id: `${manifest.name}@${manifest.version}`, dist } },
  };
}

function fill(base) {
  for (const { manifest, bytes, file } of entries) {
    const at = `/-/${file}`;
    tarballs.set(at, bytes);
    packuments.set(manifest.name, document(base, manifest, at, bytes));
  }
  // The platforms built elsewhere: their documents, as the public registry has them.
  for (const { manifest } of entries) {
    for (const [name, version] of Object.entries(manifest.optionalDependencies || {})) {
      if (packuments.has(name)) continue;
      const [os, cpu] = name.replace(/^@mcp-stdio\/cli-/, "").split("-");
      const absent = { name, version, os: [os], cpu: [cpu], ...(os === "linux" ? { libc: ["glibc"] } : {}) };
      packuments.set(name, document(base, absent, `/-/absent/${name.replace("/", "-")}-${version}.tgz`, null));
    }
  }
}

const server = http.createServer((req, res) => {
  let url = null;
  try {
    url = decodeURIComponent(req.url.split("?")[0]);
  } catch {
    // A malformed escape: answered 400 below.
  }
  let status = 404;
  let body = JSON.stringify({ error: "not found" });
  let type = "application/json";
  if (url === null) {
    status = 400;
    body = JSON.stringify({ error: "malformed URL" });
  } else if (tarballs.has(url)) {
    status = 200;
    body = tarballs.get(url);
    type = "application/octet-stream";
  } else if (packuments.has(url.slice(1))) {
    status = 200;
    body = JSON.stringify(packuments.get(url.slice(1)));
  }
  process.stderr.write(`local registry: ${req.method} ${req.url} -> ${status}\n`);
  res.writeHead(status, { "content-type": type, "content-length": Buffer.byteLength(body) });
  res.end(body);
});

server.listen(0, "127.0.0.1", () => {
  const base = `http://127.0.0.1:${server.address().port}/`;
  fill(base);
  process.stdout.write(base + "\n");
});

const stop = () => server.close(() => process.exit(0));
process.on("SIGTERM", stop);
process.on("SIGINT", stop);
setTimeout(() => {
  process.stderr.write(`local registry: stopping after ${LIFETIME_MS} ms\n`);
  process.exit(0);
}, LIFETIME_MS).unref();
