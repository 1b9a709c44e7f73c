#!/usr/bin/env bash
# scale.sh: llmgw at 10,000 nodes on this machine, against issue 26's goals,
# each figure beside the same without llmgw.
#
# It starts a cluster of its own (scripts/dev-cluster in its own state dir,
# LLMGW_SCALE_DIR, default /var/tmp/llmgw-scale-cluster): the dev cluster's
# slurmctld and 4 slurmd, and 9,996 more nodes without a slurmd, as cloud
# nodes powered down with a ResumeProgram that does nothing
# (LLMGW_DEV_EXTRA_STATE=cloud). Those stay schedulable, as a real cluster's
# nodes are: the scheduler places jobs on them and they hold their job,
# configuring, for an hour, so a queue behind them is tried against all
# 10,000 nodes every cycle. Never-registered nodes would go DOWN after
# SlurmdTimeout and every job would skip them, which measures nothing. What
# a real cluster adds, node registrations and pings, is left out: the
# figures are the controller's own work, lighter than a site's.
# sched_interval=3 and bf_interval=5 give the scheduler many cycles in a
# short window. Then it runs:
#   - BenchmarkScale (coordinator/scale_integration_test.go): users' latency,
#     the scheduler's cycles and RPCs without llmgw; llmgw's full reconcile
#     of 10,000 nodes x 200 models of 64-character names, random presence,
#     after scontrol reconfigure (time, RPCs by sdiag, users' latency
#     meanwhile, against their latency just before and after it: ended
#     jobs stay in slurmctld's memory for MinJobAge and every squeue
#     carries them, so a baseline from the start of the run would charge
#     the reconcile with the run's own jobs); RPCs per minute in steady
#     state; the scheduler's cycles with llmgw's features (the same queue
#     as without) and with its preferences; config records before and
#     after;
#   - BenchmarkFeaturePlan: models withheld at 1,000 nodes x 50 random;
#   - scripts/bench/job-submit.sh at 10,000 nodes (the first job after the
#     feature file changed; MODULE_BEFORE=2a0a373, the module before issue
#     26, beside it);
#   - scripts/bench/ingest.sh (BenchmarkCoordinatorMunge): first reports/s of
#     10,000 agents through MUNGE, this tree and, back to back, the tree at
#     INGEST_BEFORE (default 2a0a373, before issue 26; INGEST_BEFORE= leaves
#     it out), INGEST_ROUNDS rounds (default 1);
#   - BenchmarkCoordinator: llmgw status over 10,000 x 200;
# and prints the goals table. It takes 6-8 minutes on 2 cores and the
# machine's 127.0.0.11-14 and ports: run it under the cluster lock, with no
# other cluster up:
#   flock /work/cluster.lock scripts/bench/scale.sh
# Needs root. Figures are wall-clock on a shared machine: the load average
# is printed.
#
# Usage: scripts/bench/scale.sh [--keep-log FILE]
set -euo pipefail
cd "$(dirname "$0")/../.."
export GOTOOLCHAIN=${GOTOOLCHAIN:-go1.27.3}
log=$(mktemp)
while [ $# -gt 0 ]; do
	case $1 in
	--keep-log) log=$2; shift 2 ;;
	-h|--help) sed -n '2,/^set -e/p' "$0" | sed 's/^# \{0,1\}//; /^set -e/d'; exit 0 ;;
	*) echo "scale.sh: unknown argument $1; try --help" >&2; exit 2 ;;
	esac
done
[[ $EUID -eq 0 ]] || { echo "scale.sh: needs root (it starts a Slurm cluster and resets sdiag)" >&2; exit 1; }

export LLMGW_DEV_CLUSTER_DIR=${LLMGW_SCALE_DIR:-/var/tmp/llmgw-scale-cluster}
down() { scripts/dev-cluster down >/dev/null 2>&1 || true; }
trap down EXIT
down
echo "machine: $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)"
t0=$SECONDS
LLMGW_DEV_EXTRA_NODES=9996 LLMGW_DEV_EXTRA_STATE=cloud LLMGW_DEV_CLUSTER_TIMEOUT=300 \
	LLMGW_DEV_SCHED_PARAMS=sched_interval=3,bf_interval=5 scripts/dev-cluster up >/dev/null
echo "cluster of 10,000 nodes up in $((SECONDS - t0)) s"
export SLURM_CONF=$LLMGW_DEV_CLUSTER_DIR/slurm.conf
LLMGW_SCALE=1 go test -tags integration -run '^$' -bench '^BenchmarkScale$' -benchtime 1x -timeout 30m ./coordinator/ 2>&1 |
	tee -a "$log" | { grep '^scale:' || true; } | sed 's/^scale: /  /'
grep -q '^scale: steady state' "$log" || {
	echo "scale.sh: BenchmarkScale did not finish; its output:" >&2
	grep -v '^scale:' "$log" | tail -n 30 >&2
	exit 1
}
down
trap - EXIT

plan=$(go test -run '^$' -bench '^BenchmarkFeaturePlan$' -benchtime 5x ./coordinator/ | grep '^BenchmarkFeaturePlan')
echo "$plan" >>"$log"
js=$(BEFORE= MODULE_BEFORE=${MODULE_BEFORE:-2a0a373} scripts/bench/job-submit.sh 10000 | tee -a "$log")
echo "$js" | sed 's/^/  /'
# Whole outputs first: a grep that stops at its first match would end the
# pipeline early, and pipefail the script.
ing=$(BEFORE=${INGEST_BEFORE-2a0a373} scripts/bench/ingest.sh --rounds "${INGEST_ROUNDS:-1}")
echo "$ing" >>"$log"
# Its rounds' lines: "round N  this tree|before (REV)  plain|tls  RATE ...".
ingest_rate() { awk -v w="$1" '$3 == w && $5 == "plain" { print $6 }' <<<"$ing" | sort -n | awk '{ v[NR] = $1 } END { if (NR) print v[int((NR + 1) / 2)] }'; }
munge=$(ingest_rate this)
munge_before=$(ingest_rate before)
out=$(go test -run '^$' -bench 'BenchmarkCoordinator$' -benchtime=1x -timeout 30m ./coordinator/)
echo "$out" >>"$log"
status=$(grep -i 'status' <<<"$out" | sed -n 1p)
grep '^round' <<<"$ing" | sed 's/^/  ingest, MUNGE: /'
echo "  $status"

# The table, from the lines above.
field() { grep "^scale: $1" "$log" | head -1 | sed "s/^scale: $1//"; }
metric() { grep -o "[0-9.]* $1" <<<"$plan" | cut -d' ' -f1; }
recon=$(field "full reconcile after scontrol reconfigure, paced: ")
rpcs=$(field "reconcile RPCs (sdiag), paced: ")
during=$(field "during the reconcile, paced: ")
around=$(field "idle around the reconcile, paced: ")
recon_fast=$(field "full reconcile after scontrol reconfigure, unpaced: ")
during_fast=$(field "during the reconcile, unpaced: ")
without=$(field "without llmgw queue: ")
same=$(field "with llmgw's features, no preference queue: ")
again=$(field "without llmgw again queue: ")
with=$(field "with llmgw queue: ")
records=$(field "config records: ")
mean() { sed -n 's/.*main scheduler [0-9]* cycles, mean \([0-9]*\) µs.*/\1/p' <<<"$1"; }
after_change=$(awk '$2 == "tree" { print $(NF-2) }' <<<"$js")
before_change=$(awk '$2 != "tree" && $1 == 10000 { print $(NF-2) }' <<<"$js")
echo
printf '%-58s %-34s %s\n' "figure" "goal" "measured"
printf '%-58s %-34s %s\n' "models withheld, 1,000 nodes x 50 random" "0" "$(metric withheld-models) (sets that split records before: $(metric distinct-sets))"
rb=$(awk '{ print $1 }' <<<"$records")
ra=$(sed -n 's/.*, \([0-9]*\) after.*/\1/p' <<<"$records")
printf '%-58s %-34s %s\n' "config records added by llmgw, 10,000 nodes" "0" "$((ra - rb)) ($records)"
printf '%-58s %-34s %s\n' "full reconcile 10,000 x 200 random, after reconfigure" "<= 30 s" "$recon"
printf '%-58s %-34s %s\n' "  its update RPCs" "<= presence sets + 1 per record" "$rpcs"
printf '%-58s %-34s %s\n' "user squeue / sbatch latency during it" "<= 1.5x idle" "$during"
printf '%-58s %-34s %s\n' "  idle: just before and after it (same jobs in memory)" "" "$around"
printf '%-58s %-34s %s\n' "  the same reconcile unpaced (the brake alone)" "" "$recon_fast"
printf '%-58s %-34s %s\n' "  users during it" "" "$during_fast"
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2fx", a / b }'; }
printf '%-58s %-34s %s\n' "main scheduler mean cycle, with llmgw vs without" "<= 1.05x" \
	"$(mean "$same") µs vs $(mean "$again") µs: $(ratio "$(mean "$same")" "$(mean "$again")") (the same queue, back to back)"
printf '%-58s %-34s %s\n' "  its jobs naming models, as preferences" "" \
	"$(mean "$with") µs: $(ratio "$(mean "$with")" "$(mean "$again")")"
printf '%-58s %-34s %s\n' "  without llmgw at the start of the run" "" \
	"$(mean "$without") µs (before any reconfigure: another controller)"
printf '%-58s %-34s %s\n' "job_submit, first job after a change, 10,000 nodes" "<= 5 ms" "$after_change µs (before issue 26: $before_change µs)"
printf '%-58s %-34s %s\n' "coordinator first reports/s with MUNGE, 10,000 agents" ">= 5,000" "$munge${munge_before:+ (before issue 26, back to back: $munge_before)}"
echo
echo "steady state: $(field 'steady state with llmgw: ')"
echo "queues: without, at the start: $without"
echo "        with the features:      $same"
echo "        with preferences:       $with"
echo "        without, back to back:  $again"
echo "users' commands, idle, with llmgw:    $(field 'with llmgw, idle: ')"
echo "              without, back to back: $(field 'without llmgw again, idle: ')"
echo "slurmctld's saved state: $(field 'saved state: ')"
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg); the whole log: $log"
