#!/usr/bin/env bash
# resume.sh: what one kill costs. `llmgw fetch` is killed with SIGKILL (as
# a Prolog's timeout or the OOM killer does) when the origin has served
# 10%, 50% and 90% of the file, then run again to the end; the script prints
# how many bytes the origin served in all, as a multiple of the file. The
# target (issue 15, item 7) is at most 1.05× for the single-stream and the
# parallel paths: a resume must keep what it got, within chunks too.
#
# The origin (scripts/bench/origin) caps each connection, as CDNs do, so a
# kill lands mid-chunk on every connection; it counts the body bytes it
# writes and answers the total at /_served. Every result is checked with
# sha256sum.
#
# Usage: scripts/bench/resume.sh [--size SIZE] [--cap MBPS] [--connections N]
#                                [--dir DIR]
#   --size SIZE       file size, with K/M/G suffix (default 256M)
#   --cap MBPS        per-connection cap in MB/s (default 16)
#   --connections N   the parallel path's connections (default 8)
#   --dir DIR         where the file and the cache go (default $TMPDIR or /tmp)
#   --llmgw PATH      measure this llmgw binary instead of building one (to
#                     compare with an older build)
# Needs curl, sha256sum and numfmt. Everything it creates is deleted at exit.
set -euo pipefail

SIZE=256M CAP=16 CONNS=8 DIR=${TMPDIR:-/tmp} BIN=
while [ $# -gt 0 ]; do
	case $1 in
	--size) SIZE=$2; shift 2 ;;
	--cap) CAP=$2; shift 2 ;;
	--connections) CONNS=$2; shift 2 ;;
	--dir) DIR=$2; shift 2 ;;
	--llmgw) BIN=$(realpath "$2"); shift 2 ;;
	-h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
	*) echo "resume.sh: unknown argument $1 (try --help)" >&2; exit 2 ;;
	esac
done
cd "$(dirname "$0")/../.."
. scripts/bench/origin/start.sh
need_tools resume.sh curl sha256sum numfmt bc
BYTES=$(numfmt --from=iec "$SIZE")
export GOTOOLCHAIN=${GOTOOLCHAIN:-go1.27.3}
W=$(mktemp -d "$DIR/llmgw-resume-bench.XXXXXX")
ORIGIN_PID= FETCH_PID=
cleanup() {
	[ -n "$FETCH_PID" ] && kill -9 "$FETCH_PID" 2>/dev/null || true
	[ -n "$ORIGIN_PID" ] && kill "$ORIGIN_PID" 2>/dev/null || true
	rm -rf "$W"
}
trap cleanup EXIT INT TERM

echo "building llmgw and the origin ..." >&2
if [ -n "$BIN" ]; then cp "$BIN" "$W/llmgw"; else go build -o "$W/llmgw" ./cmd/llmgw; fi
start_origin "$CAP"
SERVED_URL=${URL%/*}/_served
served() { curl -sS "$SERVED_URL"; }

# once CONNS PCT: one fetch killed at PCT% served, then resumed; prints the
# fraction at the kill and the bytes served in all over the file's size.
once() {
	local conns=$1 pct=$2 start kill_at killed total path
	rm -rf "$W/cache"
	start=$(served)
	kill_at=$((start + BYTES * pct / 100))
	"$W/llmgw" fetch "$URL" --cache-dir "$W/cache" --lock-dir "$W/locks" --connections "$conns" --sha256 "$WANT" >/dev/null 2>"$W/fetch.log" &
	FETCH_PID=$!
	while [ "$(served)" -lt "$kill_at" ]; do
		kill -0 "$FETCH_PID" 2>/dev/null || { echo "resume.sh: the fetch ended before ${pct}%:" >&2; cat "$W/fetch.log" >&2; exit 1; }
		sleep 0.02
	done
	kill -9 "$FETCH_PID"
	wait "$FETCH_PID" 2>/dev/null || true
	FETCH_PID=
	killed=$(served)
	path=$("$W/llmgw" fetch "$URL" --cache-dir "$W/cache" --lock-dir "$W/locks" --connections "$conns" --sha256 "$WANT" 2>"$W/fetch.log") ||
		{ echo "resume.sh: the resumed fetch failed:" >&2; cat "$W/fetch.log" >&2; exit 1; }
	[ "$(sha256sum "$path" | cut -d' ' -f1)" = "$WANT" ] || { echo "resume.sh: $path has the wrong sha256" >&2; exit 1; }
	total=$(($(served) - start))
	printf '%.2f %.3f' "$(echo "($killed - $start) / $BYTES" | bc -l)" "$(echo "$total / $BYTES" | bc -l)"
}

echo
printf 'bytes served after one kill -9, %s file, cap %s MB/s per connection (target <= 1.05x)\n' "$SIZE" "$CAP"
printf '  %-22s %8s %10s %14s\n' path "kill at" "killed at" "served / file"
for path in "single-stream 1" "parallel $CONNS"; do
	set -- $path
	for pct in 10 50 90; do
		read -r at ratio <<<"$(once "$2" "$pct")"
		printf '  %-22s %7s%% %10s %13sx\n' "$1 ($2 conn)" "$pct" "$at" "$ratio"
	done
done
