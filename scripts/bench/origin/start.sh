# start.sh: what the fetch benchmarks (scripts/bench/fetch.sh and
# scripts/bench/resume.sh) share, sourced by both: the tools check, and a
# file of random bytes served by the origin in this directory.

# need_tools SCRIPT TOOL...: exit with a message naming the first missing tool.
need_tools() {
	local script=$1; shift
	for tool in "$@"; do
		command -v "$tool" >/dev/null || { echo "$script: $tool is not installed" >&2; exit 1; }
	done
}

# start_origin CAP: writes $BYTES random bytes to $W/model.bin and serves
# them with a per-connection cap of CAP MB/s (0: none). Sets WANT (the
# file's sha256), ORIGIN_PID and URL; the caller's cleanup kills the origin.
start_origin() {
	GOTOOLCHAIN=${GOTOOLCHAIN:-go1.27.3} go build -o "$W/origin" ./scripts/bench/origin
	head -c "$BYTES" /dev/urandom >"$W/model.bin"
	WANT=$(sha256sum "$W/model.bin" | cut -d' ' -f1)
	"$W/origin" --file "$W/model.bin" --cap "$1" --addr-file "$W/addr" >/dev/null 2>"$W/origin.log" &
	ORIGIN_PID=$!
	for _ in $(seq 50); do [ -s "$W/addr" ] && break; sleep 0.1; done
	URL=$(cat "$W/addr")
}
