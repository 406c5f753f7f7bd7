#!/usr/bin/env bash
# run-server.sh ENVFILE — starts a throwaway opledger for the client test suites.
#
# It builds bin/opledger, runs `opledger dev` in the background (a private PostgreSQL, the fake
# payment processor and the gRPC server, each on a free 127.0.0.1 port, everything in a fresh
# temporary directory; the demo tools and clients/testdata/policy_tools.yaml's refund tool),
# waits until the gRPC port answers, creates an agent key for a second tenant ("other") and
# writes ENVFILE, to be sourced by the suites:
#
#   OPLEDGER_ADDR  AGENT_KEY  APPROVER_KEY  OPERATOR_KEY  OTHER_AGENT_KEY  FAKEPAY_URL
#   OPLEDGER_DEV_PID  OPLEDGER_DEV_DIR  DATABASE_URL
#
# Stop it with clients/stop-server.sh ENVFILE. Set OPLEDGER_BIN to use an already built binary
# (the build is skipped). The server's log is $OPLEDGER_DEV_DIR/server.log.
set -euo pipefail

envfile=${1:?usage: clients/run-server.sh ENVFILE}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

bin=${OPLEDGER_BIN:-}
if [[ -z $bin ]]; then
  (cd "$root" && go build -o bin/opledger ./cmd/opledger)
  bin=$root/bin/opledger
fi

# PostgreSQL runs as the postgres user when we are root: the directory must be traversable by it.
dir=$(mktemp -d "${TMPDIR:-/tmp}/opledger-clients.XXXXXX")
chmod 755 "$dir"

# Free ports: bind port 0 and release it. Racy in theory, fine on a test machine.
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'; }
grpc_port=$(free_port)
fakepay_port=$(free_port)
while [[ $fakepay_port == "$grpc_port" ]]; do fakepay_port=$(free_port); done

# The tools: the demo tools with clients/testdata/policy_tools.yaml's entries appended to their
# list (a tool with a policy, for the policy tests), which works while `tools` is the demo file's
# last top-level key.
last_key=$(grep -E '^[a-z_]+:' "$root/examples/tools.yaml" | tail -n 1)
[[ $last_key == tools:* ]] || { echo "run-server.sh: examples/tools.yaml no longer ends with its tools list (last key: $last_key); merge clients/testdata/policy_tools.yaml another way" >&2; exit 1; }
cat "$root/examples/tools.yaml" "$root/clients/testdata/policy_tools.yaml" >"$dir/tools.yaml"

# setsid: the server gets its own process group, so a Ctrl-C aimed at the test runner does not
# tear it down half-way; stop-server.sh stops it deliberately.
setsid "$bin" dev --dir "$dir/dev" --pg-port 0 \
  --listen "127.0.0.1:$grpc_port" --tools "$dir/tools.yaml" --fakepay-listen "127.0.0.1:$fakepay_port" --console-listen "" \
  </dev/null >"$dir/server.log" 2>&1 &
pid=$!

fail() {
  echo "run-server.sh: $*" >&2
  echo "--- last lines of $dir/server.log ---" >&2
  tail -n 40 "$dir/server.log" >&2 || true
  kill -INT "$pid" 2>/dev/null || true
  exit 1
}

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

deadline=$((SECONDS + 180))
until [[ -s $dir/dev/env ]] && port_open "$grpc_port"; do
  kill -0 "$pid" 2>/dev/null || fail "opledger dev exited early"
  ((SECONDS < deadline)) || fail "opledger dev did not become ready in 180 s"
  sleep 0.2
done

# shellcheck disable=SC1091
. "$dir/dev/env"
other_key=$(DATABASE_URL=$DATABASE_URL "$bin" keys create --tenant other --role agent 2>>"$dir/server.log" | tail -n 1)
[[ -n $other_key ]] || fail "could not create the other tenant's key"

tmp=$envfile.tmp.$$
cat >"$tmp" <<ENV
export OPLEDGER_ADDR=127.0.0.1:$grpc_port
export AGENT_KEY=$AGENT_KEY
export APPROVER_KEY=$APPROVER_KEY
export OPERATOR_KEY=$OPERATOR_KEY
export OTHER_AGENT_KEY=$other_key
export FAKEPAY_URL=http://127.0.0.1:$fakepay_port
export DATABASE_URL=$DATABASE_URL
export OPLEDGER_DEV_PID=$pid
export OPLEDGER_DEV_DIR=$dir
ENV
chmod 600 "$tmp"
mv "$tmp" "$envfile"
echo "opledger dev is running (pid $pid, gRPC 127.0.0.1:$grpc_port, fake processor 127.0.0.1:$fakepay_port); env in $envfile"
