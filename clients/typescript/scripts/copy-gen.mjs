// copy-gen copies the committed generated code (../../gen/ts) into src/gen before tsc runs, so
// the package compiles into one self-contained dist/ with no path mapping to resolve at run
// time. gen/ts stays the one committed copy; src/gen is ignored by git.
import { cpSync, existsSync, rmSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const from = join(here, "..", "..", "..", "gen", "ts");
const to = join(here, "..", "src", "gen");
if (!existsSync(join(from, "opledger", "v1", "ledger_pb.ts"))) {
  console.error(`copy-gen: ${from} has no opledger/v1/ledger_pb.ts; build from the opledger repository`);
  process.exit(1);
}
rmSync(to, { recursive: true, force: true });
cpSync(from, to, { recursive: true });
