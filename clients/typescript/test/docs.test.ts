// Every TypeScript snippet of docs/clients/typescript.md type-checks (tsc --strict, ES modules)
// against the built package, imported as "@opledger/client" the way a user's project imports it,
// and runs as the page says: compiled by tsc from a .mts file to .mjs, then `node file.mjs` (Node
// 20 runs no TypeScript by itself), against the server of clients/test.sh.

import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { test } from "node:test";
import { REPO, serverEnv } from "./helpers";

const PKG = resolve(REPO, "clients", "typescript");
const env = serverEnv();
if (!env && process.env.OPLEDGER_REQUIRE_SERVER === "1") {
  throw new Error("OPLEDGER_ADDR etc. are not set and OPLEDGER_REQUIRE_SERVER=1");
}

test("the TypeScript snippets of the docs type-check, compile as the page says, and run", () => {
  const doc = readFileSync(resolve(REPO, "docs", "clients", "typescript.md"), "utf8");
  const snippets = [...doc.matchAll(/```ts\n([\s\S]*?)```/g)].map((m) => m[1]!);
  assert.ok(snippets.length >= 5, `found ${snippets.length} snippets`);
  // The page's compile command, with the options a tsconfig.json would carry (strict included).
  const flags = doc.match(/`npx tsc (--[^`]*) snippet\.mts`/);
  assert.ok(flags, "the page names the tsc command that compiles a snippet");
  const dir = mkdtempSync(join(tmpdir(), "opledger-ts-docs-"));
  try {
    mkdirSync(join(dir, "node_modules", "@opledger"), { recursive: true });
    symlinkSync(PKG, join(dir, "node_modules", "@opledger", "client"), "dir");
    symlinkSync(join(PKG, "node_modules", "@types"), join(dir, "node_modules", "@types"), "dir");
    const files = snippets.map((code, i) => {
      const f = `snippet${i}.mts`;
      // Each snippet is a module of its own (export {} keeps script-like ones apart).
      writeFileSync(join(dir, f), code + "\nexport {};\n");
      return f;
    });
    const tsc = require.resolve("typescript/bin/tsc", { paths: [PKG] });
    const args = [tsc, ...flags[1]!.split(/\s+/), "--strict", "--skipLibCheck", ...files];
    const run = spawnSync(process.execPath, args, { cwd: dir, encoding: "utf8" });
    assert.equal(run.status, 0, run.stdout + run.stderr);
    if (!env) {
      return; // compiled only: no server (clients/test.sh sets one)
    }
    files.forEach((f, i) => {
      const js = f.replace(/\.mts$/, ".mjs");
      const out = spawnSync(process.execPath, [js], { cwd: dir, encoding: "utf8", env: process.env, timeout: 60_000 });
      assert.equal(out.status, 0, `snippet ${i} (node ${js}):\n${snippets[i]}\n${out.stdout}${out.stderr}`);
    });
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
