#!/usr/bin/env bash
# features.sh: syncing Slurm node features on 1,000 nodes, llmgw's way
# against the naive one (docs/design.md §6, issue 8: <= 0.5 s, one scontrol call
# per distinct feature set).
#
# Both start from nodes whose llmgw features were wiped (as after scontrol
# reconfigure) and give each of 1000 nodes one of 10 feature sets
# (llmgw.model0..llmgw.modelK, K = i mod 10):
#   coordinator: BenchmarkFeatureReconcile (coordinator/
#           features_integration_test.go): `llmgw features` as the coordinator
#           does it, POST /v1/features with 1000 nodes reported: desired
#           features from the reports, read every node (sinfo --json), plan,
#           one scontrol update per distinct set with a compressed hostlist,
#           read back; mean of --runs;
#   slurm:  BenchmarkFeatureSync (slurm/features_integration_test.go): the
#           same without the coordinator (read, plan, calls, read-back);
#   naive:  a bash loop, one scontrol update per node.
#
# It needs the dev cluster with 1000 extra nodes (never registered, no
# slurmd; they accept feature updates, docs/slurm/behaviour.md §3), under the
# cluster lock:
#   flock /tmp/llmgw-cluster.lock bash -c 'scripts/dev-cluster down >/dev/null 2>&1;
#     LLMGW_DEV_EXTRA_NODES=1000 scripts/dev-cluster up >/dev/null &&
#     SLURM_CONF=/var/tmp/llmgw-dev-cluster/slurm.conf scripts/bench/features.sh;
#     scripts/dev-cluster down'
#
# --plan needs no cluster: the reconciler's plan for 1,000 nodes in 8
# fabrics holding random mixes of 50 models (BenchmarkFeaturePlan,
# coordinator/offered_test.go): models withheld (goal 0), AvailableFeatures
# writes (one per config record, whole), presence calls, and the distinct
# sets, each of which split a config record when llmgw wrote presence as
# AvailableFeatures (before issue 26).
#
# --records WAY needs the cluster with 1000 extra nodes, freshly up: it
# gives x0001..x1000 random mixes of 0-6 of 50 models WAY (llmgw: the
# reconciler's plan, every model offered to the whole record and presence as
# ActiveFeatures; per-set: each node's set as AvailableFeatures and
# ActiveFeatures, as before issue 26; TestWriteFeatureCommands,
# coordinator/features_records_test.go, writes the commands), through one
# interactive scontrol, and reports slurmctld's node config records before,
# after, and after the features are wiped again. Slurm shows the count
# nowhere (not in scontrol show config, nor sdiag); its scheduler logs, at
# debug2, one line per config record for each job it places
# (_build_node_list in Slurm's src/slurmctld/node_scheduler.c, 22.05 to
# 26.05: "matched 0 nodes (HOSTS)", "filtered all nodes (HOSTS)" or "found N
# usable nodes from config containing HOSTS"), so the script raises
# slurmctld's log level for a moment, submits two jobs to the extra
# partition and counts the distinct HOSTS in those lines
# (internal/slurmtest.ConfigRecords counts the same way for the cluster
# tests). Bring the cluster down and up between ways: 22.05 never merges a
# record once split.
#
# Usage: scripts/bench/features.sh [--runs N] | --plan | --records llmgw|per-set
set -euo pipefail
cd "$(dirname "$0")/../.."
export GOTOOLCHAIN=${GOTOOLCHAIN:-go1.27.3}

RUNS=5
PLAN=
RECORDS=
while [ $# -gt 0 ]; do
	case $1 in
	--runs) RUNS=$2; shift 2 ;;
	--plan) PLAN=1; shift ;;
	--records) RECORDS=${2:-}; shift 2 || { echo "features.sh: --records needs llmgw or per-set" >&2; exit 2; } ;;
	-h|--help) sed -n '2,/^set -e/p' "$0" | sed 's/^# \{0,1\}//; /^set -e/d'; exit 0 ;;
	*) echo "features.sh: unknown argument $1; try --help" >&2; exit 2 ;;
	esac
done
if [[ -n $PLAN ]]; then
	echo "the reconciler's plan for 1000 nodes in 8 fabrics, random mixes of 50 models:"
	go test -run '^$' -bench '^BenchmarkFeaturePlan$' -benchtime 20x ./coordinator/ |
		awk '/^BenchmarkFeaturePlan/ { for (i = 3; i < NF; i += 2) m[$(i + 1)] = $i
			printf "  %d models withheld, %d AvailableFeatures writes (whole records), %d presence calls; %d distinct sets (each a record split before issue 26); %.2f ms per plan\n",
				m["withheld-models"], m["record-writes"], m["presence-calls"], m["distinct-sets"], m["ns/op"] / 1e6 }'
	exit 0
fi
[[ -n ${SLURM_CONF:-} ]] || { echo "features.sh: SLURM_CONF is not set; see --help for how to start the cluster" >&2; exit 1; }
export SLURM_CONF

mapfile -t xs < <(sinfo -h -N -p extra -o %N 2>/dev/null | sort -u | sort -V | head -n 1000)
if ((${#xs[@]} < 1000)); then
	echo "features.sh: the cluster has ${#xs[@]} extra nodes, 1000 needed: start it with LLMGW_DEV_EXTRA_NODES=1000 scripts/dev-cluster up (see --help)" >&2
	exit 1
fi
all=$(scontrol show hostlist "$(IFS=,; echo "${xs[*]}")")
wipe() { scontrol update NodeName="$all" AvailableFeatures= ActiveFeatures=; }
trap wipe EXIT

# records: slurmctld's node config records, counted from its debug2 lines
# for two jobs it tries to place (see --help).
records() {
	local log size a b i
	log=$(scontrol show config | awk '$1 == "SlurmctldLogFile" { print $3 }')
	[[ -r $log ]] || { echo "features.sh: cannot read slurmctld's log ($log)" >&2; exit 1; }
	size=$(stat -c %s "$log")
	scontrol setdebug debug2
	a=$(sbatch --parsable -p extra -N1 -o /dev/null --wrap true)
	b=$(sbatch --parsable -p extra -N1 -o /dev/null --wrap true)
	# The scheduler places one job at a time: once it logs b's records,
	# it has logged all of a's.
	for ((i = 0; i < 600; i++)); do
		tail -c +"$((size + 1))" "$log" | grep -q "JobId=$b matched 0 nodes\|JobId=$b filtered" && break
		sleep 0.1
	done
	scontrol setdebug info
	scancel "$a" "$b"
	# Every attempt of either job names the same records: count each once.
	tail -c +"$((size + 1))" "$log" |
		sed -n -e 's/.*JobId=[0-9]* \(matched 0 nodes\|filtered all nodes\) (\([^)]*\)).*/\2/p' \
			-e 's/.*found [0-9]* usable nodes from config containing \(.*\)/\1/p' |
		sort -u | wc -l
}
if [[ -n $RECORDS ]]; then
	sets=$(mktemp -d)
	trap 'wipe; rm -rf "$sets"' EXIT
	LLMGW_FEATURE_SETS_DIR=$sets go test -count=1 -run '^TestWriteFeatureCommands$' ./coordinator/ >/dev/null
	[[ -r $sets/$RECORDS ]] || { echo "features.sh: --records $RECORDS: not one of $(ls "$sets")" >&2; exit 2; }
	echo "Slurm $(sinfo --version | cut -d' ' -f2); 1000 nodes, random mixes of 50 models, written $RECORDS"
	before=$(records)
	calls=$(wc -l <"$sets/$RECORDS")
	t0=$(date +%s.%N)
	# One scontrol for every command, as the coordinator runs them; an
	# error is printed, never hidden.
	scontrol <"$sets/$RECORDS" >/dev/null
	t1=$(date +%s.%N)
	after=$(records)
	wipe
	wiped=$(records)
	printf '%-8s %8s %10s %14s %14s %14s\n' way calls seconds "records before" "records after" "after a wipe"
	printf '%-8s %8s %10.2f %14s %14s %14s\n' "$RECORDS" "$calls" "$(echo "$t1 - $t0" | bc)" "$before" "$after" "$wiped"
	exit 0
fi

echo "machine: $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg); Slurm $(sinfo --version | cut -d' ' -f2)"
echo "1000 nodes, 10 distinct feature sets, from wiped features"
echo

# The naive way: one call per node.
naive=()
for ((r = 0; r < (RUNS < 3 ? RUNS : 3); r++)); do
	wipe
	t0=$(date +%s.%N)
	for ((i = 0; i < ${#xs[@]}; i++)); do
		set=""
		for ((k = 0; k <= i % 10; k++)); do set+="${set:+,}llmgw.model$k"; done
		scontrol update NodeName="${xs[i]}" AvailableFeatures="$set" ActiveFeatures="$set"
	done
	t1=$(date +%s.%N)
	naive+=("$(echo "$t1 - $t0" | bc)")
done
wipe

bench() { # PACKAGE NAME: the benchmark's result line
	local out
	out=$(go test -tags integration -run '^$' -bench "$2\$" -benchtime="${RUNS}x" -count=1 "$1" 2>&1) || {
		echo "$out" >&2
		exit 1
	}
	grep "^$2" <<<"$out"
}
metric() { grep -o "[0-9.]* $1" <<<"$2" | cut -d' ' -f1; }
secs() { echo "$(awk '{print $3}' <<<"$1") / 1000000000" | bc -l; }

coord=$(bench ./coordinator/ BenchmarkFeatureReconcile)
plain=$(bench ./slurm/ BenchmarkFeatureSync)

printf '%-36s %9s %7s\n' "method" "seconds" "calls"
printf '%-36s %9.3f %7s   (server side %s ms; mean of %s)\n' "llmgw features (coordinator, HTTP)" \
	"$(secs "$coord")" "$(metric calls/op "$coord")" "$(metric server-ms/op "$coord")" "$RUNS"
printf '%-36s %9.3f %7s   (read+plan %s ms, calls+read-back %s ms; mean of %s)\n' "slurm package alone" \
	"$(secs "$plain")" "$(metric calls/op "$plain")" "$(metric read+plan-ms/op "$plain")" "$(metric apply+readback-ms/op "$plain")" "$RUNS"
for s in "${naive[@]}"; do
	printf '%-36s %9.3f %7s\n' "naive bash (one call per node)" "$s" 1000
done
