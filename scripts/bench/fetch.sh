#!/usr/bin/env bash
# fetch.sh: time `llmgw fetch` against curl and aria2c fetching the same file
# from the same origin on 127.0.0.1, in one run, side by side.
#
# The targets (docs/design.md §6): with a per-connection cap on the origin — how
# CDNs and object stores treat each TCP flow — llmgw's eight connections must
# at least match aria2c -x8 -s8, the tool people reach for, and beat a single
# curl stream fourfold; with no cap, where one stream can already fill the
# disk, llmgw must stay within 0.9x of curl writing to the same disk.
#
# Each tool is timed twice: when it exits, and when its file is on disk
# (exit plus fdatasync). llmgw fsyncs before its rename — a cache entry must
# survive a crash — while curl and aria2c exit with the bytes still in the
# page cache; on a disk slower than the network only the on-disk clock
# compares like with like, and the script prints both.
#
# Every download is checked with sha256sum against the source; a mismatch
# fails the script. Each tool runs RUNS times and the median is reported. The
# "llmgw --sha256" row is llmgw verifying the digest itself before the rename,
# which curl and aria2c do not do; it shows what that costs.
#
# Usage: scripts/bench/fetch.sh [--size SIZE] [--cap MBPS] [--runs N]
#                               [--connections N] [--dir DIR]
#   --size SIZE       file size, with K/M/G suffix (default 4G), random bytes
#   --cap MBPS        per-connection cap on the origin in MB/s (default 0: none)
#   --runs N          runs per tool, median reported (default 3)
#   --connections N   llmgw --connections and aria2c -x/-s (default 8)
#   --dir DIR         where the file and every download go (default $TMPDIR
#                     or /tmp); all tools write to the same disk
#   --llmgw PATH      measure this llmgw binary instead of building one (to
#                     compare with an older build)
# What one kill costs (bytes served after kill -9 and a resume) is
# scripts/bench/resume.sh.
# Needs curl, aria2c and sha256sum. Everything it creates is deleted at exit.
set -euo pipefail

SIZE=4G CAP=0 RUNS=3 CONNS=8 DIR=${TMPDIR:-/tmp} BIN=
while [ $# -gt 0 ]; do
	case $1 in
	--size) SIZE=$2; shift 2 ;;
	--cap) CAP=$2; shift 2 ;;
	--runs) RUNS=$2; shift 2 ;;
	--connections) CONNS=$2; shift 2 ;;
	--dir) DIR=$2; shift 2 ;;
	--llmgw) BIN=$(realpath "$2"); shift 2 ;;
	-h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
	*) echo "fetch.sh: unknown argument $1 (try --help)" >&2; exit 2 ;;
	esac
done
cd "$(dirname "$0")/../.."
. scripts/bench/origin/start.sh
need_tools fetch.sh curl aria2c sha256sum numfmt bc
BYTES=$(numfmt --from=iec "$SIZE")
export GOTOOLCHAIN=${GOTOOLCHAIN:-go1.27.3}
W=$(mktemp -d "$DIR/llmgw-fetch-bench.XXXXXX")
ORIGIN_PID=
cleanup() {
	[ -n "$ORIGIN_PID" ] && kill "$ORIGIN_PID" 2>/dev/null || true
	rm -rf "$W"
}
trap cleanup EXIT INT TERM

echo "building llmgw and the origin ..." >&2
if [ -n "$BIN" ]; then cp "$BIN" "$W/llmgw"; else go build -o "$W/llmgw" ./cmd/llmgw; fi
echo "writing $SIZE of random bytes to $W and serving them ..." >&2
start_origin "$CAP"

# run NAME CMD... times one download; the command must leave the file at
# $OUT. Two clocks: when the tool exits, and when the file is also on disk
# (fdatasync). llmgw fsyncs before its rename, as a cache that survives a
# crash must; curl and aria2c leave the bytes in the page cache, so only the
# second clock compares like with like.
declare -A EXIT DURABLE
median() { printf '%s\n' "$@" | sort -g | sed -n "$((($# + 1) / 2))p"; }
run() {
	local name=$1; shift
	local exits=() durables=()
	for i in $(seq "$RUNS"); do
		rm -rf "$W/out" && mkdir -p "$W/out"
		sync
		local t0 t1 t2
		t0=$(date +%s.%N)
		"$@" >/dev/null 2>"$W/tool.log" || { echo "$name failed:" >&2; cat "$W/tool.log" >&2; exit 1; }
		t1=$(date +%s.%N)
		sync -d "$OUT"
		t2=$(date +%s.%N)
		local got
		got=$(sha256sum "$OUT" | cut -d' ' -f1)
		if [ "$got" != "$WANT" ]; then
			echo "$name run $i: sha256 $got, want $WANT" >&2
			exit 1
		fi
		exits+=("$(echo "$BYTES / 1000000 / ($t1 - $t0)" | bc -l)")
		durables+=("$(echo "$BYTES / 1000000 / ($t2 - $t0)" | bc -l)")
		printf '  %-16s run %d: %8.1f MB/s at exit, %8.1f MB/s on disk\n' "$name" "$i" "${exits[-1]}" "${durables[-1]}" >&2
	done
	EXIT[$name]=$(median "${exits[@]}")
	DURABLE[$name]=$(median "${durables[@]}")
}

OUT_LLMGW=$("$W/llmgw" fetch "$URL" --cache-dir "$W/probe" --lock-dir "$W/locks" --connections 1 2>/dev/null | sed "s#^$W/probe#$W/out/cache#")
rm -rf "$W/probe"

echo "fetching $URL ($SIZE, cap ${CAP} MB/s per connection, $RUNS runs each) ..." >&2
OUT=$OUT_LLMGW run llmgw "$W/llmgw" fetch "$URL" --cache-dir "$W/out/cache" --lock-dir "$W/locks" --connections "$CONNS"
OUT=$OUT_LLMGW run "llmgw --sha256" "$W/llmgw" fetch "$URL" --cache-dir "$W/out/cache" --lock-dir "$W/locks" --connections "$CONNS" --sha256 "$WANT"
OUT=$W/out/curl.bin run curl curl -sS --fail -o "$W/out/curl.bin" "$URL"
# falloc is aria2c's fastest allocation (posix_fallocate), like llmgw's; the
# Debian default, prealloc, writes zeros first and would flatter llmgw.
OUT=$W/out/aria2.bin run "aria2c -x$CONNS" aria2c -q -x"$CONNS" -s"$CONNS" --file-allocation=falloc \
	--allow-overwrite=true --auto-file-renaming=false -d "$W/out" -o aria2.bin "$URL"

ratio() { echo "$1 / $2" | bc -l | xargs printf '%.2f'; }
A="aria2c -x$CONNS"
echo
printf 'fetch of %s from 127.0.0.1, cap %s MB/s per connection, median of %d runs\n' "$SIZE" "$CAP" "$RUNS"
printf '  %-18s %14s %14s\n' tool "MB/s at exit" "MB/s on disk"
for t in llmgw "llmgw --sha256" curl "$A"; do
	printf '  %-18s %14.1f %14.1f\n' "$t" "${EXIT[$t]}" "${DURABLE[$t]}"
done
for clock in on-disk at-exit; do
	if [ $clock = on-disk ]; then L=${DURABLE[llmgw]} C=${DURABLE[curl]} R=${DURABLE[$A]}; else L=${EXIT[llmgw]} C=${EXIT[curl]} R=${EXIT[$A]}; fi
	printf '  %-8s llmgw / aria2c = %s   llmgw / curl = %s\n' "$clock" "$(ratio "$L" "$R")" "$(ratio "$L" "$C")"
done
if [ "$CAP" != 0 ]; then
	printf '  targets: llmgw / aria2c >= 1.0, llmgw / curl >= 4.0\n'
else
	printf '  target: llmgw / curl >= 0.9\n'
fi
