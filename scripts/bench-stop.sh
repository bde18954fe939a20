#!/usr/bin/env bash
# bench-stop: time from SIGTERM to exit of `tresor serve` on the embedded
# default, with the writer's closing snapshot it waits for (see
# docs/performance.md, "The writer's closing snapshot, unpaced on the
# embedded default"). One stream is made by `tresor simulate` (PLAYS plays
# of 2 €, 2 000 players), then started and stopped once so that it holds
# both kinds of snapshot; each run starts serve on a fresh copy of it,
# waits for ready, opens an account and deposits once (so that the writer
# has something new to snapshot), waits a second and stops it. Prints one
# line per run: the stop's seconds, the writer's closing snapshot and the
# read models'. Compare two builds with BIN (alternate them by hand).
#
#   BIN=bin/tresor scripts/bench-stop.sh [RUNS] [PLAYS]   (defaults 4 and 182000)
set -euo pipefail
cd "$(dirname "$0")/.."

runs=${1:-4}
plays=${2:-182000}
bin=${BIN:-bin/tresor}
dir=$(mktemp -d "${TMPDIR:-/tmp}/tresor-bench-stop.XXXXXX")
trap 'rm -rf "$dir"' EXIT

fail() { echo "bench-stop: FAILED: $*" >&2; exit 1; }
command -v curl >/dev/null || fail "curl is needed to poll /v1/ready"
[ -x "$bin" ] || go build -o "$bin" ./cmd/tresor || fail "go build"

. scripts/serve-ready.sh

"$bin" simulate --data "$dir/base" --price 2 --plays "$plays" --players 2000 --quiet --json >/dev/null || fail "simulate"
serve_ready "$dir/base" "$dir/serve.log"
kill -TERM "$pid"; wait "$pid" || fail "the first stop"

for i in $(seq 1 "$runs"); do
  rm -rf "$dir/copy"; cp -a "$dir/base" "$dir/copy"; sync
  serve_ready "$dir/copy" "$dir/serve.log"
  op=$("$bin" token --data "$dir/copy" --role operator)
  curl -fsS -o /dev/null -X PUT -H "Authorization: Bearer $op" -H 'Content-Type: application/json' \
    -d '{"weekly_deposit_limit":"100.00"}' "http://$addr/v1/players/bench-stop" || fail "open the account"
  curl -fsS -o /dev/null -X POST -H "Authorization: Bearer $op" -H "Idempotency-Key: bench-stop-$i" -H 'Content-Type: application/json' \
    -d '{"amount":"5.00"}' "http://$addr/v1/players/bench-stop/deposits" || fail "deposit"
  sleep 1
  t0=$(date +%s.%N); kill -TERM "$pid"; wait "$pid" || fail "serve's exit after SIGTERM"; t1=$(date +%s.%N)
  writer=$(grep 'msg="snapshot taken"' "$dir/serve.log" | tail -1 | grep -o 'bytes=[0-9]* encode=[^ ]* total=[^ ]*' || echo "none")
  models=$(grep 'msg="projections snapshot taken"' "$dir/serve.log" | tail -1 | grep -o 'bytes=[0-9]* freeze=[^ ]* after=[^ ]*' || echo "none")
  printf 'run=%s stop_s=%.2f writer_closing_snapshot: %s read_models_snapshot: %s\n' "$i" \
    "$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')" "$writer" "$models"
done
