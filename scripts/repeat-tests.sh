#!/usr/bin/env bash
# repeat-tests.sh SET RUNS [LOGDIR]: runs one set of the cluster tests RUNS
# times, one fresh process each, from a test binary built once, and prints
# each run's outcome and wall time, then the tally. A test that fails one
# run in twenty is a defect: this is how that claim is checked. SET is
#   cluster     the whole ./cluster package
#   tresor      ./cmd/tresor's cluster tests (make test's sizes)
#   eventstore  ./eventstore's lease, leader and node-name tests
# Each run's log is kept in LOGDIR (default .runs/SET), a failing one as
# NN.fail.log. Exit status: 1 if any run failed.
set -u -o pipefail

set_name=${1:?usage: $0 cluster|tresor|eventstore RUNS [LOGDIR]}
runs=${2:?usage: $0 cluster|tresor|eventstore RUNS [LOGDIR]}
root=$(cd "$(dirname "$0")/.." && pwd)
logdir=${3:-$root/.runs/$set_name}

case $set_name in
cluster)
	pkg=cluster pattern='.' ;;
tresor)
	pkg=cmd/tresor
	pattern='^(TestStandbyTakesOverAfterKill9|TestServeLeavesAHungNATSNode|TestServeWaitsForARestartingCluster|TestServeWaitingForItsClusterSaysSoAndStopsCleanly|TestASecondServeUnderTheSameNodeNameIsRefused|TestAServeWhoseNodeNameWasTakenWhileFrozenStops|TestTakeoverOnNATSProcesses|TestAClusterNodesDirectoryRefusesTheEmbeddedLedger)$' ;;
eventstore)
	pkg=eventstore pattern='Lease|Leader|NodeName' ;;
*)
	echo "unknown set $set_name" >&2; exit 2 ;;
esac

# Absolute: each run starts in its package's directory.
logdir=$(mkdir -p "$logdir" && cd "$logdir" && pwd) || exit 2
bin=$logdir/$set_name.test
(cd "$root" && go test -c -o "$bin" "./$pkg") || exit 2

passes=0
failures=0
times=()
for i in $(seq -w 1 "$runs"); do
	log=$logdir/$i.log
	start=$EPOCHREALTIME
	# The package's directory, as go test would: cmd/tresor's tests build
	# the binary from it.
	(cd "$root/$pkg" && "$bin" -test.count=1 -test.v -test.timeout 30m -test.run "$pattern") >"$log" 2>&1
	status=$?
	wall=$(awk -v a="$start" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }')
	times+=("$wall")
	if [ "$status" -eq 0 ]; then
		passes=$((passes + 1))
		printf 'run %s: pass %6.1f s\n' "$i" "$wall"
	else
		failures=$((failures + 1))
		mv "$log" "$logdir/$i.fail.log"
		failed=$(grep -o -E -- '--- FAIL: [^ ]+' "$logdir/$i.fail.log" | cut -d' ' -f3 | paste -sd' ')
		printf 'run %s: FAIL %6.1f s %s (%s)\n' "$i" "$wall" "${failed:-exit status $status}" "$logdir/$i.fail.log"
	fi
done
median=$(printf '%s\n' "${times[@]}" | sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}')
printf '%s: %d runs, %d passed, %d failed, median %.1f s a run\n' "$set_name" "$runs" "$passes" "$failures" "$median"
[ "$failures" -eq 0 ]
