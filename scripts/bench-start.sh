#!/usr/bin/env bash
# bench-start: time from `tresor serve` start to ready (writer rebuilt and
# projections at its head, GET /v1/ready) after 1..BLOCKS sold-out blocks,
# without and with snapshots, in one run (docs/performance.md,
# "Snapshots (start time)"). Each block is sold out by `tresor simulate`
# on the same data directory; after each, serve is started three times:
# --snapshots=false (full replay), then twice with snapshots (the first may
# take the read models' snapshot at its clean stop, the second starts from
# everything there is). Prints one line per start, then each start's log
# lines about snapshots and readiness, and a table at the end.
#
#   scripts/bench-start.sh [BLOCKS] [PRICE]      (defaults 1 and 2)
#   TRESOR_BENCH_PLAYS=20000 scripts/bench-start.sh 3   # a quick dry run
#
# Long: a sold-out block is 3.27 M events (about 5 minutes of simulate on
# two quiet cores) and a full replay several minutes more per size.
set -euo pipefail
cd "$(dirname "$0")/.."

blocks=${1:-1}
price=${2:-2}
plays=${TRESOR_BENCH_PLAYS:-450000}
bin=${BIN:-bin/tresor}
dir=$(mktemp -d "${TMPDIR:-/tmp}/tresor-bench-start.XXXXXX")
trap 'rm -rf "$dir"' EXIT

fail() { echo "bench-start: FAILED: $*" >&2; exit 1; }
. scripts/serve-ready.sh
command -v curl >/dev/null || fail "curl is needed to poll /v1/ready"
go build -o "$bin" ./cmd/tresor || fail "go build"

# start_once LABEL [flags]: starts serve, polls /v1/ready every 100 ms,
# prints the seconds to ready, stops serve with SIGTERM and waits for it.
start_once() {
  local label=$1; shift
  local t0; t0=$(date +%s.%N)
  serve_ready "$dir/data" "$dir/serve.log" "$@"
  local t1; t1=$(date +%s.%N)
  kill -TERM "$pid"; wait "$pid" || true
  # What each start loaded and stored: snapshot sizes and times.
  grep -i 'snapshot\|ledger rebuilt\|ready' "$dir/serve.log" | sed "s/^/[$n $label] /" >>"$dir/snapshots.log" || true
  local s; s=$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')
  printf 'blocks=%s start=%-22s ready_after_s=%.1f\n' "$n" "$label" "$s"
  rows+=("| $n | $label | $(printf '%.1f' "$s") s |")
}

rows=()
for n in $(seq 1 "$blocks"); do
  "$bin" simulate --data "$dir/data" --price "$price" --plays "$plays" --players 1024 --quiet --json >"$dir/simulate-$n.json" \
    || fail "simulate of block $n"
  start_once "full replay" --snapshots=false
  start_once "snapshots (1st)"
  start_once "snapshots (2nd)"
done
echo
cat "$dir/snapshots.log"
echo
echo "| simulate runs (each a sold-out block unless TRESOR_BENCH_PLAYS) | start | ready after |"
echo "|---:|---|---:|"
printf '%s\n' "${rows[@]}"
