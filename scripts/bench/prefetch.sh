#!/usr/bin/env bash
# prefetch.sh: warm starts from backfill's plans (issue 28), on the dev
# cluster, with prefetch off and on, for each Slurm release.
#
# A replay of a synthetic queue (TestPrefetchReplay in cmd/llmgw/
# prefetch_bench_integration_test.go says exactly what): LLMGW_BENCH_JOBS
# jobs (default 200) arriving at random, each for one of 16 models no node
# holds at the start (8-40 MiB from an origin sending 4 MiB/s per
# connection, so one fetch takes as long as a backfill interval or longer),
# on one node or two, 2-10 s long with a one-minute time limit, so that
# backfill (sched/backfill, bf_interval=5 on the dev cluster) plans jobs
# behind running ones. Real slurmctld, slurmd, Prologs, agents (through
# their fabric's swarm) and coordinator, per release. "off" runs the same
# coordinator with a prefetch budget of one byte per node, so the same
# counters measure both and no node is asked anything.
#
# Printed per mode: warm starts (the Prolog took the fast path on every node
# of the job) of all jobs and of the jobs planned at least one fetch time
# ahead (goal >= 80% with prefetch on); allocation to first task for warm
# and cold jobs (slurmctld's log against the job's first line); prefetched
# bytes no job used (goal <= 25%); jobs whose start llmgw held (goal 0: the
# default mode never holds a job); the prefetcher's calls to slurmctld per
# backfill interval (goal <= 1).
#
# Usage: scripts/bench/prefetch.sh [--releases "bookworm trixie sid"] [--jobs N] [--seed S]
# It takes the cluster lock itself and brings each release's cluster up
# and down (scripts/test-integration), about 15 minutes per release at 200
# jobs.
set -euo pipefail
cd "$(dirname "$0")/../.."
export GOTOOLCHAIN=${GOTOOLCHAIN:-go1.27.3}
releases="bookworm trixie sid"
jobs=200
seed=28
while [ $# -gt 0 ]; do
	case $1 in
	--releases) releases=$2; shift 2 ;;
	--jobs) jobs=$2; shift 2 ;;
	--seed) seed=$2; shift 2 ;;
	-h|--help) sed -n '2,/^set -e/p' "$0" | sed 's/^# \{0,1\}//; /^set -e/d'; exit 0 ;;
	*) echo "prefetch.sh: unknown argument $1; try --help" >&2; exit 2 ;;
	esac
done
make -s build
for rel in $releases; do
	log=$(mktemp "/tmp/prefetch-bench-$rel.XXXXXX.log")
	echo "=== release $rel"
	flock /work/cluster.lock env LLMGW_RELEASES="$rel" LLMGW_TEST_RUN='^TestPrefetchReplay$' LLMGW_TEST_PKGS=./cmd/llmgw/ \
		LLMGW_BENCH_PREFETCH=1 LLMGW_BENCH_JOBS="$jobs" LLMGW_BENCH_SEED="$seed" GOFLAGS=-timeout=90m \
		scripts/test-integration >"$log" 2>&1 || true
	# The table; the whole run's output stays in the log.
	sed -n '/^prefetch replay:/,/^replay took/p' "$log"
	grep -E '^\s+prefetch_bench_integration_test.go:[0-9]+: mode' "$log" || true
	grep -q '^prefetch replay:' "$log" || { echo "prefetch.sh: the replay on $rel printed no table; see $log" >&2; exit 1; }
done
