#!/usr/bin/env bash
# coordinator.sh: the coordinator at cluster scale, against its targets
# (docs/design.md §6, issue 5): 10,000 simulated nodes reporting 50 weights each
# must be ingested at >= 5,000 reports/s on this 2-core machine, and
# `llmgw status` over 10,000 nodes x 200 catalog models must answer in
# <= 300 ms.
#
# It runs BenchmarkCoordinator (coordinator/bench_test.go): a real
# coordinator over a real sqlite file, real HTTP on 127.0.0.1, 64 concurrent
# agents posting pre-encoded reports (agents run on their own nodes, so
# encoding is not charged to the coordinator's cores). Two ingest figures:
# the first reports into an empty database, where every presence row is new,
# and the steady state, where a node's weights are unchanged (every later
# report, and every report after a coordinator restart). The status figure
# is what `llmgw status` does: GET /v1/status, decode, render the table;
# median of 7. It also prints ingest with MUNGE authentication on, over
# plain HTTP and over TLS (BenchmarkCoordinatorMunge), the CPU one report's
# authentication costs the coordinator and its munged, one request at a
# time (BenchmarkAuthenticate), one credential decode through munged's
# protocol from Go (what the coordinator uses), through libmunge and
# through unmunge (api/munge BenchmarkDecode), and the store alone
# (BenchmarkIngest).
#
# Rates are wall-clock and so depend on what else the machine runs; the CPU
# microseconds per report do not, and the load average is printed beside
# them.
#
# Usage: scripts/bench/coordinator.sh [--runs N]
set -euo pipefail
cd "$(dirname "$0")/../.."
export GOTOOLCHAIN=${GOTOOLCHAIN:-go1.27.3}

RUNS=1
while [ $# -gt 0 ]; do
	case $1 in
	--runs) RUNS=$2; shift 2 ;;
	-h|--help) sed -n '2,/^set -e/p' "$0" | sed 's/^# \{0,1\}//; /^set -e/d'; exit 0 ;;
	*) echo "coordinator.sh: unknown argument $1; try --help" >&2; exit 2 ;;
	esac
done

echo "machine: $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)"
# The benchmark prints its figures while `go test` has printed the
# benchmark's name but not its result line; put them on lines of their own.
go test -run '^$' -bench 'BenchmarkCoordinator$' -benchtime=1x -count="$RUNS" -timeout 30m ./coordinator/ |
	grep -v -E '^(goos|goarch|pkg|cpu|PASS|ok|--- BENCH)' |
	sed -E 's/^(BenchmarkCoordinator-[0-9]+)[[:space:]]+(ingest)/\1\n\2/' |
	tr -s '\t' ' '
echo
# The same ingest with MUNGE authentication on (needs root and munged: the
# benchmark starts its own), and munged's decode alone, through libmunge and
# through unmunge: the coordinator's cost of authentication per report.
if [ "$(id -u)" = 0 ] && { command -v munged >/dev/null 2>&1 || [ -x /usr/sbin/munged ]; }; then
	# With --runs, each run after the first prints its first line after
	# the benchmark's name, as above: split it off, or grep drops it.
	go test -run '^$' -bench 'BenchmarkCoordinatorMunge$' -benchtime=1x -count="$RUNS" -timeout 30m ./coordinator/ |
		sed -E 's/^(BenchmarkCoordinatorMunge-[0-9]+)[[:space:]]+(ingest)/\1\n\2/' |
		grep -E '^ingest'
	go test -run '^$' -bench 'BenchmarkAuthenticate$' -benchtime=3000x -count="$RUNS" ./coordinator/ |
		grep -E '^Benchmark' | tr '\t' ' ' | tr -s ' '
	go test -run '^$' -bench 'BenchmarkDecode$' -benchtime=2000x -count="$RUNS" ./api/munge/ |
		grep -E '^Benchmark' | tr '\t' ' ' | tr -s ' '
else
	echo "(MUNGE figures skipped: they need root and munged)"
fi
echo
echo "store alone (no HTTP, batches of 64):"
go test -run '^$' -bench 'BenchmarkIngest$' -benchtime=1x -count="$RUNS" -timeout 30m ./coordinator/store/ |
	grep -E '^Benchmark' | tr '\t' ' ' | tr -s ' '
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
