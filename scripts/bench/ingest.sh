#!/usr/bin/env bash
# ingest.sh: the coordinator's first reports per second with MUNGE (issue
# 26's goal: >= 5,000 at 10,000 agents on 2 cores), this tree beside the
# tree at BEFORE, run back to back and alternated round by round.
#
# It runs BenchmarkCoordinatorMunge (coordinator/auth_bench_test.go): a
# coordinator over a real sqlite file and its own munged, 10,000 nodes'
# first reports of 50 weights each from 64 connections, each with a MUNGE
# credential made before the clock starts; over plain HTTP and over TLS.
# The tree at BEFORE (default 2a0a373, before issue 26's round) is
# exported with git archive into a temporary directory and benchmarked the
# same way. A rate on a shared machine says as much about the machine's
# load as about the code: only rates taken under the same load compare,
# hence back to back. The CPU microseconds per report (this process,
# clients included, and its munged) depend less on the load; they are
# printed beside the rates, and the medians of the rounds at the end.
#
# Needs root and munged (the benchmark starts its own munged).
#
# Usage: scripts/bench/ingest.sh [--rounds N]   (default 3)
#        BEFORE=<git rev> (default 2a0a373); BEFORE= runs this tree alone
set -euo pipefail
cd "$(dirname "$0")/../.."
export GOTOOLCHAIN=${GOTOOLCHAIN:-go1.27.3}

rounds=3
while [ $# -gt 0 ]; do
	case $1 in
	--rounds) rounds=$2; shift 2 ;;
	-h|--help) sed -n '2,/^set -e/p' "$0" | sed 's/^# \{0,1\}//; /^set -e/d'; exit 0 ;;
	*) echo "ingest.sh: unknown argument $1; try --help" >&2; exit 2 ;;
	esac
done
[[ $EUID -eq 0 ]] || { echo "ingest.sh: needs root (the benchmark starts its own munged)" >&2; exit 1; }

before=${BEFORE-2a0a373}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if [ -n "$before" ]; then
	if ! git archive "$before" 2>/dev/null | tar -x -C "$tmp"; then
		echo "ingest.sh: cannot export $before from this repository; set BEFORE=<rev>, or BEFORE= for this tree alone" >&2
		exit 1
	fi
fi

# bench DIR LABEL runs the benchmark in DIR and prints one line per phase:
# LABEL, plain or tls, reports/s, µs CPU per report, µs in munged.
bench() {
	(cd "$1" && go test -run '^$' -bench 'BenchmarkCoordinatorMunge$' -benchtime=1x -timeout 30m ./coordinator/) |
		sed -E 's/^BenchmarkCoordinatorMunge-[0-9]+[[:space:]]+//' |
		sed -n -E "s/^ingest with MUNGE( and TLS)?, first reports: +([0-9]+) reports\/s.*; +([0-9]+) µs CPU per report in the coordinator .* \+ +([0-9]+) µs in its munged.*/$2 \1 \2 \3 \4/p" |
		sed -E 's/ and TLS / tls /; t; s/^([^ ]+) /\1 plain /'
}

echo "machine: $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)"
runs=$(mktemp -p "$tmp")
for r in $(seq 1 "$rounds"); do
	# Alternate which tree goes first, so a load that grows or fades
	# through a round does not always favour the same one.
	order=("this" "before")
	if [ $((r % 2)) -eq 0 ]; then order=("before" "this"); fi
	for which in "${order[@]}"; do
		case $which in
		this) bench . this ;;
		before) if [ -n "$before" ]; then bench "$tmp" before; fi ;;
		esac
	done | tee -a "$runs" | while read -r label mode rate cpu munged; do
		printf 'round %d  %-22s %-6s %6d first reports/s  %4d µs CPU/report + %3d µs in munged\n' \
			"$r" "$([ "$label" = this ] && echo "this tree" || echo "before ($before)")" "$mode" "$rate" "$cpu" "$munged"
	done
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"

# median LABEL MODE FIELD
median() {
	awk -v l="$1" -v m="$2" -v f="$3" '$1 == l && $2 == m { print $f }' "$runs" | sort -n |
		awk '{ v[NR] = $1 } END { if (NR) print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'
}
echo
printf '%-44s %-10s %-14s %s\n' "medians of $rounds rounds" "goal" "this tree" "before ($before)"
for mode in plain tls; do
	name="first reports/s with MUNGE"
	[ "$mode" = tls ] && name="first reports/s with MUNGE and TLS"
	t=$(median this "$mode" 3) b=$(median before "$mode" 3)
	ratio=$(awk -v a="$t" -v b="$b" 'BEGIN { if (b > 0) printf " (%.2fx)", a / b }')
	printf '%-44s %-10s %-14s %s\n' "$name" "$([ "$mode" = plain ] && echo ">= 5,000")" "$t$ratio" "${b:--}"
	printf '%-44s %-10s %-14s %s\n' "  µs CPU per report, coordinator + munged" "" \
		"$(median this "$mode" 4) + $(median this "$mode" 5)" "$([ -n "$b" ] && echo "$(median before "$mode" 4) + $(median before "$mode" 5)" || echo -)"
done
