#!/usr/bin/env bash
# test.sh [SUITE…] — runs the client test suites against one throwaway opledger.
#
# It starts the server with run-server.sh (a private PostgreSQL, the fake processor, opledger
# dev; see that script), exports its env file (OPLEDGER_ADDR, AGENT_KEY, APPROVER_KEY,
# OPERATOR_KEY, OTHER_AGENT_KEY, FAKEPAY_URL, …), runs every suite whose directory exists under
# clients/ (python, typescript, go, java; or only the ones named), stops the server and exits
# non-zero if any suite failed. Each suite also runs its agent_loop example, and checks that the
# example refuses to run without FAKEPAY_URL.
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
suites=("$@")
((${#suites[@]})) || suites=(python typescript go java)

envfile=$(mktemp "${TMPDIR:-/tmp}/opledger-clients-env.XXXXXX")
trap '"$here/stop-server.sh" "$envfile"' EXIT
"$here/run-server.sh" "$envfile" || { echo "test.sh: the server did not start" >&2; exit 1; }
# shellcheck disable=SC1090
. "$envfile"

# fails_without_fakepay CMD…: an example run without FAKEPAY_URL must stop at once and name it;
# with a guessed default it would count charges at the wrong processor.
fails_without_fakepay() {
  local out
  if out=$(env -u FAKEPAY_URL -u OPLEDGER_FAKEPAY_URL "$@" 2>&1); then
    echo "the example ran without FAKEPAY_URL" >&2
    return 1
  fi
  grep -q "FAKEPAY_URL.*source the env file" <<<"$out" ||
    { echo "the example failed without saying that FAKEPAY_URL is missing: $out" >&2; return 1; }
}

# --- python (clients/python): a venv at clients/python/.venv, the package installed from source
# the way a user installs it (pip install ./clients/python), with its framework extras (their
# tested versions pinned in requirements-test.txt), pytest, the example.
python_suite() {
  cd "$here/python" || return 1
  local py
  py=$(command -v python3.11 || command -v python3)
  if [[ ! -x .venv/bin/python ]]; then
    "$py" -m venv .venv || return 1
  fi
  .venv/bin/python -m pip install -q --disable-pip-version-check '.[pydantic-ai,openai-agents,langgraph]' -r requirements-test.txt || return 1
  # src/ layout: `import opledger` can only be the installed package, as users get it.
  OPLEDGER_REQUIRE_SERVER=1 .venv/bin/python -m pytest -q -p no:cacheprovider tests || return 1
  .venv/bin/python examples/agent_loop.py "$envfile" || return 1
  fails_without_fakepay .venv/bin/python examples/agent_loop.py
}

# --- typescript (clients/typescript): npm ci (package-lock.json), tsc, node --test, the example.
typescript_suite() {
  cd "$here/typescript" || return 1
  npm ci --no-audit --no-fund --loglevel=error || return 1
  OPLEDGER_REQUIRE_SERVER=1 npm test || return 1
  node dist/examples/agent_loop.js "$envfile" || return 1
  fails_without_fakepay node dist/examples/agent_loop.js
}

# --- go (clients/go, a module of its own): go vet, its tests (the fingerprint, the keys, the
# retry policy and the ToolRunner against stub servers, and the flows against this script's server,
# OPLEDGER_REQUIRE_SERVER=1: a missing server fails instead of skipping), then the example.
go_suite() {
  cd "$here/go" || return 1
  go vet ./... || return 1
  OPLEDGER_REQUIRE_SERVER=1 go test -count=1 ./... || return 1
  go run ./examples/agent_loop || return 1
  fails_without_fakepay go run ./examples/agent_loop
}

# --- java (clients/java): owned by the Java client; define java_suite here.
# Maven (downloads to ~/.m2 once), JUnit 5 through Surefire against this script's server
# (OPLEDGER_REQUIRE_SERVER=1: a missing server fails instead of skipping), then the example.
java_suite() {
  cd "$here/java" || return 1
  rm -rf target/surefire-reports
  OPLEDGER_REQUIRE_SERVER=1 mvn -q -B -Dstyle.color=never package
  local rc=$?
  cat target/surefire-reports/*.txt 2>/dev/null | grep -h "Tests run" || true
  ((rc == 0)) || return 1
  mvn -q -B -Dstyle.color=never exec:java || return 1
  fails_without_fakepay mvn -q -B -Dstyle.color=never exec:java
}

passed=()
failed=()
for s in "${suites[@]}"; do
  [[ -d $here/$s ]] || continue
  if ! declare -F "${s}_suite" >/dev/null; then
    echo "=== $s: no runner in clients/test.sh yet; skipped"
    continue
  fi
  echo "=== $s"
  if ("${s}_suite"); then
    passed+=("$s")
    echo "=== $s: ok"
  else
    failed+=("$s")
    echo "=== $s: FAILED"
  fi
done

echo "client suites passed: ${passed[*]:-none}; failed: ${failed[*]:-none}"
((${#failed[@]} == 0))
