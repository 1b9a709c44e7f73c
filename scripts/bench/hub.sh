#!/usr/bin/env bash
# hub.sh: what registering and refreshing a Hugging Face repository costs,
# against the Hub stand-in (weights/hub/hubtest, served by
# scripts/bench/hub) on 127.0.0.1, side by side with the floor.
#
# The targets (issue 25):
#   - `llmgw models add NAME hf:org/big` of a 200-file repository in at most
#     2 s: the revision resolved, the tree listed, the index read, the
#     selection checked and stored at a coordinator on a sqlite file. Beside
#     it, the floor: curl asking the Hub the same two API calls and the index
#     (what any tool must read), and the ratio of the two.
#   - a node's Prolog fetches the selection once; `llmgw models repin` to an
#     unchanged commit changes nothing, and the next job's Prolog reads 0
#     bytes from the Hub;
#   - a new revision that changes one file: repin, and the next job's Prolog
#     reads that file's bytes and no others, into a new snapshot.
# Bytes are counted by the stand-in (what it served), not by llmgw.
#
# Usage: scripts/bench/hub.sh [--files N] [--runs N] [--llmgw PATH] [--dir DIR]
#   --files N      files in the repository (default 200)
#   --runs N       runs of models add, median reported (default 5)
#   --llmgw PATH   measure this llmgw binary instead of building one
#   --dir DIR      where the coordinator's database and the node's caches go
#                  (default $TMPDIR or /tmp)
# Needs curl and python3. Everything it creates is deleted at exit.
set -euo pipefail

FILES=200 RUNS=5 BIN= DIR=${TMPDIR:-/tmp}
while [ $# -gt 0 ]; do
	case $1 in
	--files) FILES=$2; shift 2 ;;
	--runs) RUNS=$2; shift 2 ;;
	--llmgw) BIN=$(realpath "$2"); shift 2 ;;
	--dir) DIR=$2; shift 2 ;;
	-h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
	*) echo "hub.sh: unknown argument $1 (try --help)" >&2; exit 2 ;;
	esac
done
cd "$(dirname "$0")/../.."
for tool in curl python3 bc; do command -v "$tool" >/dev/null || { echo "hub.sh: $tool is not installed" >&2; exit 1; }; done
export GOTOOLCHAIN=${GOTOOLCHAIN:-go1.27.3}
W=$(mktemp -d "$DIR/llmgw-hub-bench.XXXXXX")
PIDS=()
cleanup() {
	for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$W"
}
trap cleanup EXIT
if [ -z "$BIN" ]; then
	go build -o "$W/llmgw" ./cmd/llmgw
	BIN=$W/llmgw
fi
go build -o "$W/hub" ./scripts/bench/hub

"$W/hub" --files "$FILES" --addr-file "$W/hub.addr" 2>"$W/hub.log" &
PIDS+=($!)
for _ in $(seq 100); do [ -s "$W/hub.addr" ] && break; sleep 0.05; done
read -r HUB CONTROL <"$W/hub.addr"

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])' 2>/dev/null || echo 18420)
COORD=http://127.0.0.1:$port
printf 'admin-secret\n' >"$W/admin.token"
chmod 600 "$W/admin.token"
"$BIN" coordinator --listen "127.0.0.1:$port" --db "$W/c.db" --admin-token-file "$W/admin.token" --log-level warn 2>"$W/coordinator.log" &
PIDS+=($!)
for _ in $(seq 100); do curl -sf "$COORD/readyz" >/dev/null && break; sleep 0.05; done
export LLMGW_COORDINATOR=$COORD LLMGW_TOKEN_FILE=$W/admin.token HF_ENDPOINT=$HUB

now() { date +%s.%N; }
median() { sort -n | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
served() { curl -sf "$CONTROL/served"; }

echo "hub.sh: org/big, $FILES files, at $HUB; coordinator $COORD; llmgw $("$BIN" version)"

# models add, RUNS times (removed between runs), and the floor.
adds=() floors=()
for i in $(seq "$RUNS"); do
	"$BIN" models rm big >/dev/null 2>&1 || true
	t0=$(now)
	"$BIN" models add big hf:org/big >"$W/add.out"
	adds+=("$(echo "$(now) - $t0" | bc -l)")
	t0=$(now)
	sha=$(curl -sf "$HUB/api/models/org/big/revision/main" | sed 's/.*"sha":"\([0-9a-f]*\)".*/\1/')
	curl -sf "$HUB/api/models/org/big/tree/$sha?recursive=true&expand=false" >/dev/null
	curl -sf "$HUB/org/big/resolve/$sha/model.safetensors.index.json" >/dev/null
	floors+=("$(echo "$(now) - $t0" | bc -l)")
done
add=$(printf '%s\n' "${adds[@]}" | median)
floor=$(printf '%s\n' "${floors[@]}" | median)
selected=$(sed -n 's/.*: \([0-9]*\) files, .*/\1/p' "$W/add.out" | head -n1)
printf '\n%-44s %10s %10s\n' "" "median s" "target"
printf '%-44s %10.3f %10s\n' "llmgw models add big hf:org/big" "$add" "<= 2"
printf '%-44s %10.3f %10s\n' "curl x3: revision, tree, index (the floor)" "$floor" "-"
printf '%-44s %10.1fx\n' "ratio llmgw / floor" "$(echo "$add / $floor" | bc -l)"
printf '(%s of %s files selected)\n' "$selected" "$FILES"
awk -v a="$add" 'BEGIN { exit !(a <= 2) }' || echo "hub.sh: models add took $add s, above the 2 s target" >&2

# A node: its Prolog fetches in its own process (no agent), as a job's.
node=$W/node
mkdir -p "$node"
cat >"$node/agent.toml" <<EOT
coordinator = "$COORD"
cache_dir = "$node/cache"
state_dir = "$node/state"
run_dir = "$node/run"
socket = "$node/run/agent.sock"
fetch_deadline = "5m"
EOT
job() {
	env -i PATH="$PATH" HF_ENDPOINT="$HUB" SLURM_JOB_ID="$1" SLURMD_NODENAME=n1 SPANK_LLMGW_MODEL=big "$BIN" prolog --config "$node/agent.toml" 2>>"$W/prolog.log"
	grep -q '"path"' "$node/run/jobs/$1.json" || { echo "hub.sh: job $1's Prolog failed: $(cat "$node/run/jobs/$1.json")" >&2; exit 1; }
}
# The Hub bytes of each job's Prolog alone: a repin reads the index on the
# admin's machine, which is not a node's.
s0=$(served)
job 1
s1=$(served)
# What the node fetched is what its scan, and so the coordinator, calls held.
held=$("$BIN" scan "$node/cache/hub" --json 2>/dev/null | python3 -c 'import json, sys; print(sum(1 for w in json.load(sys.stdin)["weights"] if w["complete"]))')
# The selection's bytes, as the catalog lists them.
want1=$("$BIN" models list --json | python3 -c 'import json, sys; print(sum(f["size_bytes"] for m in json.load(sys.stdin)["models"] for f in m["hub"]["files"]))')
"$BIN" models repin big >"$W/repin.out"
r1=$(served)
job 2
s2=$(served)
changed=$(curl -sf -X POST "$CONTROL/commit?change=config.json")
"$BIN" models repin big >"$W/repin2.out"
r2=$(served)
job 3
s3=$(served)
snaps=$(ls "$node/cache/hub/models--org--big/snapshots" | wc -l)


printf '\n%-60s %14s %14s\n' "" "Hub bytes" "want"
printf '%-60s %14d %14d\n' "job 1: first fetch of the selection" "$((s1 - s0))" "$want1"
printf '%-60s %14d %14d\n' "job 2: after a repin to an unchanged commit" "$((s2 - r1))" 0
printf '%-60s %14d %14d\n' "job 3: after a new revision changing config.json" "$((s3 - r2))" "$changed"
printf 'repin, unchanged: %s\n' "$(head -n1 "$W/repin.out")"
printf 'repin, one file changed: %s\n' "$(tail -n1 "$W/repin2.out")"
printf 'snapshots on the node: %s (the first revision kept beside the new one)\n' "$snaps"
fail=0
[ "$held" -ge 1 ] || { echo "hub.sh: the node's scan does not call the fetched snapshot complete: $("$BIN" scan "$node/cache/hub" 2>&1)" >&2; fail=1; }
[ "$((s1 - s0))" -eq "$want1" ] || { echo "hub.sh: the first fetch read $((s1 - s0)) bytes, want the selection's $want1" >&2; fail=1; }
[ "$((s2 - r1))" -eq 0 ] || { echo "hub.sh: a repin to an unchanged commit read $((s2 - r1)) bytes" >&2; fail=1; }
[ "$((s3 - r2))" -eq "$changed" ] || { echo "hub.sh: a new revision of one changed file read $((s3 - r2)) bytes, want $changed" >&2; fail=1; }
exit "$fail"
