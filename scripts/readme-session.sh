#!/usr/bin/env bash
# readme-session.sh runs the README's grpcurl session verbatim against a
# fresh `opledger dev` and checks what it printed, so the README cannot rot.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/opledger-readme.XXXXXX")
chmod 755 "$work" # PostgreSQL runs as the postgres user when we are root
cd "$root" && go build -o "$work/opledger" ./cmd/opledger
make -s -C "$root" "$root/.bin/grpcurl" >/dev/null 2>&1 || GOBIN="$root/.bin" go install github.com/fullstorydev/grpcurl/cmd/grpcurl@v1.9.3
cd "$work"
"$work/opledger" dev >dev.out 2>dev.err &
dev=$!
trap 'kill -INT $dev 2>/dev/null; wait $dev 2>/dev/null; rm -rf "$work"' EXIT
for _ in $(seq 1 120); do
  grep -q "opledger dev is ready" dev.out 2>/dev/null && break
  kill -0 $dev 2>/dev/null || { cat dev.out dev.err; exit 1; }
  sleep 0.5
done
grep -q "opledger dev is ready" dev.out || { echo "opledger dev did not start"; tail -20 dev.err; exit 1; }

# The session: every ```sh block of the README's grpcurl session, then of its console part (the
# payment it prepares for the console to show), in order, as written.
awk '/^## A grpcurl session/{on=1} /^## Running it for real/{on=0} /^## Approve in a browser/{on=1} /^## Documentation/{on=0}
  on&&/^```sh$/{b=1;next} on&&/^```$/{b=0} b' \
  "$root/README.md" | sed "s|export PATH=\$PWD/.bin:\$PATH|export PATH=$root/.bin:\$PATH|" >session.sh
out=$(bash session.sh 2>&1 || true)
echo "$out"
fail=0
check() { grep -q -- "$1" <<<"$out" || { echo "readme-session: expected output missing: $1"; fail=1; }; }
check "opledger.v1.LedgerService"
check '"replayed": true'
check "IDEMPOTENCY_KEY_REUSED"
check '"state": "STATE_READY"'
check '"state": "STATE_SUCCEEDED"'
check "EVENT_TYPE_SUCCEEDED"
# The console part's new payment is what the console lists: one operation awaiting approval, for
# another invoice than INV-2048.
. ./.opledger-dev/env
awaiting=$("$root/.bin/grpcurl" -plaintext -H "authorization: Bearer $APPROVER_KEY" -d '{"states":["STATE_AWAITING_APPROVAL"]}' \
  127.0.0.1:50051 opledger.v1.LedgerService/ListOperations | jq -r '.operations[]?.args.invoice_id')
[[ $awaiting =~ ^INV-[0-9]+$ && $awaiting != INV-2048 ]] ||
  { echo "readme-session: the console part left no new payment awaiting approval (found: ${awaiting:-none})"; fail=1; }
[[ $(grep -c '"externalRef": "ch_' <<<"$out") -ge 2 ]] || { echo "readme-session: no charge reference shown twice"; fail=1; }
grep -qx "1" <<<"$out" || { echo "readme-session: the processor should hold exactly 1 charge"; fail=1; }
((fail == 0)) && echo "readme-session: the README session works verbatim"
exit $fail
