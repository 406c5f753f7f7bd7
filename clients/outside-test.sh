#!/usr/bin/env bash
# outside-test.sh [NAME…] — installs each client and each framework adapter the way its docs page
# says, in a scratch project outside the repository, and runs the page's quick start against a real
# server.
#
# A NAME is a client language (python, typescript, go, java: docs/clients/NAME.md) or a framework
# integration (pydantic-ai, openai-agents, langgraph, ai-sdk, openai-agents-js:
# docs/integrations/NAME.md); without NAMEs, every client and every integration page there is. Each
# page has three kinds of fenced blocks, marked with an HTML comment on the line before them:
#
#   <!-- outside-test: install -->        the install commands (sh), run with bash -e
#   <!-- outside-test: program FILE -->   a file of the project (the quick start, Java's pom.xml)
#   <!-- outside-test: run -->            the command that runs the program (sh)
#
# "/path/to/opledger" in them is replaced by this checkout. Every language gets a fresh directory
# under a temporary directory outside the repository; the files are written first, then the install
# and run commands are run there with the server's OPLEDGER_ADDR, AGENT_KEY, APPROVER_KEY and
# FAKEPAY_URL in the environment. The program must make exactly one new charge at the fake
# processor; a client's program must also print the reason of the one typed error it catches
# (IDEMPOTENCY_KEY_REUSED), and an integration's what its model was told of the approved call's
# success ("status":"succeeded", the runner's for_model text). Any failing step fails the page, and
# any failed page fails the script.
#
# The server comes from clients/run-server.sh (OPLEDGER_BIN skips its build), and is stopped at the
# end; KEEP_OUTSIDE_DIR=1 keeps the scratch projects for a look.
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
langs=("$@")
if ((${#langs[@]} == 0)); then
  langs=(python typescript go java)
  for page in "$root"/docs/integrations/*.md; do
    [[ -f $page ]] && langs+=("$(basename "$page" .md)")
  done
fi

# page NAME: the docs page of a client language or of an integration.
page() {
  case $1 in
  python | typescript | go | java) echo "$root/docs/clients/$1.md" ;;
  *) echo "$root/docs/integrations/$1.md" ;;
  esac
}

scratch=$(mktemp -d "${TMPDIR:-/tmp}/opledger-outside.XXXXXX")
case "$scratch/" in
"$root"/*)
  echo "outside-test.sh: $scratch is inside the repository; set TMPDIR elsewhere" >&2
  exit 1
  ;;
esac
envfile=$scratch/server.env
cleanup() {
  "$here/stop-server.sh" "$envfile"
  if [[ ${KEEP_OUTSIDE_DIR:-} == 1 ]]; then
    echo "outside-test.sh: scratch projects kept in $scratch"
  else
    rm -rf "$scratch"
  fi
}
trap cleanup EXIT
"$here/run-server.sh" "$envfile" || { echo "outside-test.sh: the server did not start" >&2; exit 1; }
# shellcheck disable=SC1090
. "$envfile"

# blocks DOC DIR: writes DIR/install.sh, DIR/run.sh and every program file of DOC into DIR, with
# /path/to/opledger replaced by this checkout; fails when a kind of block is missing.
blocks() {
  python3 - "$1" "$2" "$root" <<'PY'
import os, re, sys
doc, out, root = sys.argv[1:4]
text = open(doc, encoding="utf-8").read()
found = {"install": 0, "run": 0, "program": 0}
for m in re.finditer(r"<!-- outside-test: (install|run|program)\s*(\S*)\s*-->\n```[a-z]*\n(.*?)```", text, re.S):
    kind, name, body = m.group(1), m.group(2), m.group(3).replace("/path/to/opledger", root)
    found[kind] += 1
    path = os.path.join(out, name if kind == "program" else kind + ".sh")
    if kind == "program" and (not name or os.path.isabs(name) or ".." in name.split("/")):
        sys.exit(f"{doc}: bad program file name {name!r}")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(body)
missing = [k for k, n in found.items() if n == 0]
if missing or found["install"] > 1 or found["run"] > 1:
    sys.exit(f"{doc}: need one install block, one run block and program blocks; found {found}")
PY
}

# charges prints how many charges the fake processor holds.
charges() {
  python3 -c 'import json, sys, urllib.request
print(len(json.load(urllib.request.urlopen(sys.argv[1] + "/charges", timeout=10))["data"]))' "${FAKEPAY_URL%/}"
}

# outside LANG: the whole check for one language, in its own scratch directory.
outside() {
  local lang=$1 dir=$scratch/$1 doc before after out
  doc=$(page "$lang")
  mkdir -p "$dir" || return 1
  blocks "$(page "$lang")" "$dir" || return 1
  echo "--- $lang: install (${doc#"$root"/})"
  sed 's/^/    /' "$dir/install.sh"
  (cd "$dir" && bash -euo pipefail install.sh) || { echo "$lang: the documented install failed" >&2; return 1; }
  before=$(charges) || return 1
  echo "--- $lang: run: $(cat "$dir/run.sh")"
  out=$(cd "$dir" && env -u GOFLAGS OPLEDGER_ADDR="$OPLEDGER_ADDR" AGENT_KEY="$AGENT_KEY" APPROVER_KEY="$APPROVER_KEY" \
    FAKEPAY_URL="$FAKEPAY_URL" bash -euo pipefail run.sh 2>&1)
  local rc=$?
  printf '%s\n' "$out" | sed 's/^/    /'
  ((rc == 0)) || { echo "$lang: the program failed (exit $rc)" >&2; return 1; }
  after=$(charges) || return 1
  if ((after - before != 1)); then
    echo "$lang: expected exactly one new charge at the fake processor, found $((after - before))" >&2
    return 1
  fi
  if [[ $doc == */docs/clients/* ]]; then
    grep -q "IDEMPOTENCY_KEY_REUSED" <<<"$out" ||
      { echo "$lang: the program did not report the IDEMPOTENCY_KEY_REUSED error it must catch" >&2; return 1; }
  else
    grep -q '"status":"succeeded"' <<<"$out" ||
      { echo "$lang: the program did not show what its model was told of the succeeded call" >&2; return 1; }
  fi
}

passed=()
failed=()
for lang in "${langs[@]}"; do
  if [[ ! -f $(page "$lang") ]]; then
    echo "outside-test.sh: no $(page "$lang")" >&2
    failed+=("$lang")
    continue
  fi
  echo "=== $lang (outside the repository, in $scratch/$lang)"
  start=$SECONDS
  if outside "$lang"; then
    passed+=("$lang")
    echo "=== $lang: ok ($((SECONDS - start)) s)"
  else
    failed+=("$lang")
    echo "=== $lang: FAILED ($((SECONDS - start)) s)"
  fi
done

echo "installed from outside: passed ${passed[*]:-none}; failed ${failed[*]:-none}"
((${#failed[@]} == 0))
