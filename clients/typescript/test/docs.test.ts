// Every TypeScript snippet of docs/clients/typescript.md type-checks (tsc --strict, ES modules)
// against the built package, imported as "@opledger/client" the way a user's project imports it.

import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { test } from "node:test";
import { REPO } from "./helpers";

const PKG = resolve(REPO, "clients", "typescript");

test("the TypeScript snippets of the docs type-check", () => {
  const doc = readFileSync(resolve(REPO, "docs", "clients", "typescript.md"), "utf8");
  const snippets = [...doc.matchAll(/```ts\n([\s\S]*?)```/g)].map((m) => m[1]!);
  assert.ok(snippets.length >= 5, `found ${snippets.length} snippets`);
  const dir = mkdtempSync(join(tmpdir(), "opledger-ts-docs-"));
  try {
    mkdirSync(join(dir, "node_modules", "@opledger"), { recursive: true });
    symlinkSync(PKG, join(dir, "node_modules", "@opledger", "client"), "dir");
    const files = snippets.map((code, i) => {
      const f = `snippet${i}.mts`;
      // Each snippet is a module of its own (export {} keeps script-like ones apart).
      writeFileSync(join(dir, f), code + "\nexport {};\n");
      return f;
    });
    writeFileSync(
      join(dir, "tsconfig.json"),
      JSON.stringify({
        compilerOptions: {
          target: "ES2022",
          module: "nodenext",
          moduleResolution: "nodenext",
          strict: true,
          noEmit: true,
          skipLibCheck: true,
          types: ["node"],
          typeRoots: [join(PKG, "node_modules", "@types")],
        },
        files,
      }),
    );
    const tsc = require.resolve("typescript/bin/tsc", { paths: [PKG] });
    const run = spawnSync(process.execPath, [tsc, "-p", dir], { encoding: "utf8" });
    assert.equal(run.status, 0, run.stdout + run.stderr);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
