#!/bin/sh
# scan.sh: time `llmgw scan` against `du -sb` over a synthetic tree of about
# 100,000 files, warm and with the dentry and inode caches dropped.
#
# The target (docs/design.md §6) is a scan no slower than du -sb: both must stat
# every file, so du is the floor an operator already knows. llmgw does more
# per file (it follows Hugging Face snapshot symlinks into blobs/ and reads
# every sharded checkpoint's index), and still has to keep up.
#
# Usage: scripts/bench/scan.sh        (from the repository root)
#   LLMGW=path      the binary to time (default: built with `make build`)
#   RUNS=5          runs of each tool per measurement, interleaved; the
#                   median is the result, the best is printed beside it
#   KEEP=1          keep the tree and print where it is
#
# The tree is made of sparse files, so it costs almost nothing on disk:
#   100 model directories: 4 safetensors shards + index + configs, and 890
#       small files below extra/ (a checkout with its docs and eval output)
#   hub/: 40 Hugging Face cache models, 25 files each, symlinks into blobs/
#   500 .gguf files and 100 split GGUF sets of 3 parts
#   7,500 notes beside them
set -eu

RUNS=${RUNS:-5}
cd "$(dirname "$0")/../.."
if [ -z "${LLMGW:-}" ]; then
	make -s build >&2
	LLMGW=$PWD/bin/llmgw
fi

TREE=$(mktemp -d "${TMPDIR:-/tmp}/llmgw-scan-bench.XXXXXX")
if [ -z "${KEEP:-}" ]; then
	trap 'rm -rf "$TREE"' EXIT INT TERM
fi
M=$TREE/models
mkdir -p "$M"

echo "building the tree in $TREE ..." >&2
cd "$M"
for d in $(seq -f 'dir-%03g' 1 100); do
	mkdir -p "$d/extra"
	for i in 1 2 3 4; do
		truncate -s 4G "$d/model-0000$i-of-00004.safetensors"
	done
	printf '{"weight_map":{"a":"model-00001-of-00004.safetensors","b":"model-00002-of-00004.safetensors","c":"model-00003-of-00004.safetensors","d":"model-00004-of-00004.safetensors"}}' \
		>"$d/model.safetensors.index.json"
	echo '{}' >"$d/config.json"
	echo '{}' >"$d/tokenizer.json"
	(cd "$d/extra" && seq -f 'f-%04g.txt' 1 890 | xargs touch)
done
for m in $(seq -f 'm%02g' 1 40); do
	repo=hub/models--org--$m
	mkdir -p "$repo/blobs" "$repo/snapshots/0123456789abcdef" "$repo/refs"
	echo 0123456789abcdef >"$repo/refs/main"
	for i in $(seq -f '%02g' 1 25); do
		truncate -s 100M "$repo/blobs/blob$i"
		ln -s "../../blobs/blob$i" "$repo/snapshots/0123456789abcdef/model-000$i-of-00025.safetensors"
	done
done
seq -f 'single-%03g.gguf' 1 500 | xargs truncate -s 1G
for s in $(seq -f 'split-%03g' 1 100); do
	for p in 1 2 3; do truncate -s 2G "$s-0000$p-of-00003.gguf"; done
done
seq -f 'note-%05g.txt' 1 7500 | xargs touch
cd - >/dev/null
FILES=$(find "$M" | wc -l)

# now_ns prints the clock in nanoseconds.
now_ns() { date +%s%N; }

# median and best print the middle and the smallest of their arguments.
median() { printf '%s\n' "$@" | sort -n | sed -n "$((($# + 1) / 2))p"; }
best() { printf '%s\n' "$@" | sort -n | head -n 1; }

# once COLD CMD...: nanoseconds taken by one run of CMD, after dropping the
# dentry and inode caches when COLD is 1.
once() {
	if [ "$1" = 1 ]; then
		sync
		echo 2 >/proc/sys/vm/drop_caches
	fi
	shift
	t0=$(now_ns)
	"$@" >/dev/null
	t1=$(now_ns)
	echo $((t1 - t0))
}

secs() { awk -v n="$1" 'BEGIN { printf "%.3fs", n / 1e9 }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }

# measure LABEL COLD: RUNS runs of each, interleaved (du, scan, du, scan,
# ...) so that both see the same background load, and a line of results.
measure() {
	du_ts=
	sc_ts=
	for _ in $(seq "$RUNS"); do
		du_ts="$du_ts $(once "$2" du -sb "$M")"
		sc_ts="$sc_ts $(once "$2" "$LLMGW" scan --json "$M")"
	done
	# shellcheck disable=SC2086
	du_m=$(median $du_ts) sc_m=$(median $sc_ts) du_b=$(best $du_ts) sc_b=$(best $sc_ts)
	printf '%-6s %10s %12s %8s %12s %12s %8s\n' "$1" "$(secs "$du_m")" "$(secs "$sc_m")" "$(ratio "$sc_m" "$du_m")" \
		"$(secs "$du_b")" "$(secs "$sc_b")" "$(ratio "$sc_b" "$du_b")"
}

# Sanity: the scan must find what the tree holds, or timing it means nothing.
found=$("$LLMGW" scan --json "$M" | grep -c '"size_bytes"' || true)
echo "llmgw scan reports $found weights (the tree holds 100 + 40 + 500 + 100 = 740)" >&2

"$LLMGW" scan --json "$M" >/dev/null
du -sb "$M" >/dev/null

echo "tree: $FILES files and directories, $(nproc) CPUs, $(df -T "$TREE" | awk 'NR == 2 { print $2 }'), load $(cut -d' ' -f1 /proc/loadavg)"
echo "$RUNS runs of each, interleaved; median and best:"
printf '%-6s %10s %12s %8s %12s %12s %8s\n' "" "du -sb" "llmgw scan" "ratio" "best du" "best scan" "ratio"
measure warm 0
if [ "$(id -u)" = 0 ] && (echo 2 >/proc/sys/vm/drop_caches) 2>/dev/null; then
	measure cold 1
else
	echo "cold: not measured (dropping caches needs root and a writable /proc/sys/vm/drop_caches)"
fi
echo "ratio = llmgw scan / du -sb; at or below 1.00 meets the target"
if [ -n "${KEEP:-}" ]; then
	echo "tree kept in $TREE"
fi
