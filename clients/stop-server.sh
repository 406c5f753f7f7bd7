#!/usr/bin/env bash
# stop-server.sh ENVFILE — stops the server that clients/run-server.sh started: SIGINT (a
# graceful stop that also stops its private PostgreSQL), a wait of up to 60 s, SIGKILL as a last
# resort; then removes its temporary directory and ENVFILE.
set -uo pipefail

envfile=${1:?usage: clients/stop-server.sh ENVFILE}
[[ -f $envfile ]] || { echo "stop-server.sh: $envfile not found; nothing to stop" >&2; exit 0; }
# shellcheck disable=SC1090
. "$envfile"
pid=${OPLEDGER_DEV_PID:-}
if [[ -z $pid ]]; then
  # run-server.sh failed before writing it (and stopped what it had started).
  rm -f "$envfile"
  exit 0
fi

if kill -INT "$pid" 2>/dev/null; then
  for _ in $(seq 1 300); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.2
  done
  if kill -0 "$pid" 2>/dev/null; then
    echo "stop-server.sh: pid $pid ignored SIGINT for 60 s; killing it" >&2
    kill -KILL "$pid" 2>/dev/null || true
    # The private PostgreSQL outlives a killed parent: stop it too.
    data=${OPLEDGER_DEV_DIR:-}/dev/pg/data
    if [[ -n ${OPLEDGER_DEV_DIR:-} && -f $data/postmaster.pid ]]; then
      kill -QUIT "$(head -n 1 "$data/postmaster.pid")" 2>/dev/null || true
    fi
  fi
fi

if [[ -n ${OPLEDGER_DEV_DIR:-} && -d $OPLEDGER_DEV_DIR && ${KEEP_SERVER_DIR:-} != 1 ]]; then
  rm -rf "$OPLEDGER_DEV_DIR"
fi
rm -f "$envfile"
