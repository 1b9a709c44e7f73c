#!/bin/bash
# hook.sh: the Prolog's fast path against a bash hook doing `test -e`, as
# whole processes (DESIGN.md §6: within 1.5x, no call to slurmctld).
#
#   make build && scripts/bench/hook.sh [RUNS]
#
# The fast path is the case of every job whose weights are already on the
# node: read the job from the environment, read agent.toml and the
# node-local catalog copy, stat the cached file, write the job's record.
# Both commands are run by hyperfine without a shell (-N), with the
# environment a Prolog gets (SLURM_JOB_ID, SLURMD_NODENAME, the comment tag).
# LLMGW_HOOK_FULL=/bin/false makes a hand-off to the slow path fail the run,
# so what is timed is the fast path and nothing else.
set -euo pipefail
cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/../.."
runs=${1:-1000}
hook=$PWD/bin/llmgw-hook
[[ -x $hook ]] || { echo "hook.sh: $hook is missing; run: make build" >&2; exit 1; }
command -v hyperfine >/dev/null || { echo "hook.sh: hyperfine is not installed (apt-get install hyperfine)" >&2; exit 1; }
if file "$hook" | grep -q 'dynamically linked'; then
	echo "hook.sh: warning: $hook is dynamically linked; build it with CGO_ENABLED=0 (make build does)" >&2
fi

tmp=$(mktemp -d)
# The job record goes to the run dir, which on a node is /run/llmgw, a
# tmpfs, where the record's fsyncs cost nothing; /dev/shm stands for it
# here (on this VM /run is on the root disk).
run=$(mktemp -d /dev/shm/llmgw-bench.XXXXXX 2>/dev/null || mktemp -d)
trap 'rm -rf "$tmp" "$run"' EXIT
src=https://origin.invalid/models/bench.gguf
size=1048576
mkdir -p "$tmp/cache" "$tmp/state"
# The cache name is catalog.CachePathFor's: 16 hex digits of the source's
# sha256, '-', the file name. If this drifts the fast path misses, hands off
# to /bin/false and the run fails; it cannot be timed by mistake.
name=$(printf %s "$src" | sha256sum | cut -c1-16)-bench.gguf
head -c "$size" /dev/zero >"$tmp/cache/$name"
cat >"$tmp/agent.toml" <<TOML
cache_dir = "$tmp/cache"
state_dir = "$tmp/state"
run_dir = "$run"
socket = "$run/agent.sock"
TOML
cat >"$tmp/state/catalog.json" <<JSON
{"coordinator": "http://127.0.0.1:8420", "fetched": "2025-01-01T00:00:00Z",
 "models": [{"name": "other", "source": "hf:org/other/x.gguf"}, {"name": "bench", "source": "$src", "size_bytes": $size}]}
JSON
printf '#!/bin/bash\ntest -e %q\n' "$tmp/cache/$name" >"$tmp/bash-hook"
chmod +x "$tmp/bash-hook"

export SLURM_JOB_ID=4242 SLURMD_NODENAME=n1 SLURM_JOB_COMMENT='my run llmgw:model=bench' LLMGW_HOOK_FULL=/bin/false
"$hook" prolog --config "$tmp/agent.toml"
grep -q "\"path\":\"$tmp/cache/$name\"" "$run/jobs/4242.json" || {
	echo "hook.sh: the fast path wrote no record with the cached path:" >&2
	cat "$run/jobs/4242.json" >&2
	exit 1
}

hyperfine -N --warmup 100 --runs "$runs" --export-json "$tmp/h.json" \
	-n 'bash test -e' "$tmp/bash-hook" \
	-n 'llmgw-hook prolog (fast path)' "$hook prolog --config $tmp/agent.toml" >&2
python3 - "$tmp/h.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))["results"]
b, h = r[0], r[1]
print(f"bash test -e:          {b['mean']*1e3:.2f} ms ± {b['stddev']*1e3:.2f} (median {b['median']*1e3:.2f})")
print(f"llmgw-hook fast path:  {h['mean']*1e3:.2f} ms ± {h['stddev']*1e3:.2f} (median {h['median']*1e3:.2f})")
print(f"ratio (mean): {h['mean']/b['mean']:.2f}x   ratio (median): {h['median']/b['median']:.2f}x   target <= 1.5x")
PY
