#!/bin/bash
# scripts/demo-bookkeeping.sh - `make demo-bookkeeping`: the page bookkeeping of agents that
# share a system prompt through the real kvmmd, without a model (`make demo` runs real agents:
# scripts/demo.sh).
#
# Starts kvmmd (host backend) in a temporary directory, runs N agent processes
# (tools/kvmm-agent, libkvmm clients) that share a system prompt and each add their own
# turns, waits until every agent holds its whole conversation mapped, and prints the frames
# kvmm uses (the union of the agents' block tables) against the frames the same contexts
# need without sharing (the sum of their block counts), and the prefix hit rate.  Then it
# lets the agents go, stops kvmmd with SIGTERM and checks that it exited 0.  A second part
# runs the same workload on the core library in one process (tools/kvmm-demo).
#
# Environment: KVMM_DEMO_AGENTS (default 8), KVMM_DEMO_TURNS (default 4).
set -euo pipefail

agents=${KVMM_DEMO_AGENTS:-8}
turns=${KVMM_DEMO_TURNS:-4}
kvmmd=./kvmm/kvmmd
agent=./tools/kvmm-agent
for p in "$kvmmd" "$agent" ./tools/kvmm-demo; do
	[ -x "$p" ] || { echo "demo: $p was not built" >&2; exit 1; }
done

dir=$(mktemp -d /tmp/kvmm-demo.XXXXXX)
daemon=""
agent_pids=()
cleanup() {
	for p in "${agent_pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
	[ -n "$daemon" ] && kill -9 "$daemon" 2>/dev/null || true
	rm -rf "$dir"
}
trap cleanup EXIT
fail() {
	echo "demo: $*" >&2
	[ -f "$dir/kvmmd.log" ] && sed 's/^/demo: kvmmd: /' "$dir/kvmmd.log" | tail -20 >&2
	exit 1
}

sock=$dir/kvmmd.sock
echo "== kvmm demo: $agents agents share a system prompt through kvmmd"
# 4096 frames of 32 KiB (128 MiB); the demo model stores 16 tokens per page
"$kvmmd" --foreground --socket "$sock" --page-size 32K --frames 4096 \
	--namespace "agents:4096" --log-level notice >"$dir/kvmmd.log" 2>&1 &
daemon=$!
for _ in $(seq 100); do
	[ -S "$sock" ] && break
	kill -0 "$daemon" 2>/dev/null || fail "kvmmd exited at start"
	sleep 0.05
done
[ -S "$sock" ] || fail "kvmmd did not create $sock"
echo "kvmmd (pid $daemon) is listening on $sock: 4096 frames of 32 KiB, host backend"

mkfifo "$dir/go"
start=$(date +%s.%N)
for i in $(seq 1 "$agents"); do
	"$agent" --socket "$sock" --ns agents --id "$i" --turns "$turns" \
		--report "$dir/agent.$i" --go "$dir/go" 2>"$dir/agent.$i.err" &
	agent_pids+=($!)
done

# wait for every agent's report (each then holds its conversation until "go")
for _ in $(seq 600); do
	n=$(find "$dir" -maxdepth 1 -name 'agent.*' ! -name '*.err' ! -name '*.tmp' | wc -l)
	[ "$n" -eq "$agents" ] && break
	for p in "${agent_pids[@]}"; do
		if ! kill -0 "$p" 2>/dev/null; then
			wait "$p" || { cat "$dir"/agent.*.err >&2; fail "an agent failed"; }
		fi
	done
	sleep 0.1
done
[ "$n" -eq "$agents" ] || fail "agents did not report in time"
secs=$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.2f", e - s }')

private=$(awk '$1 == "blocks" { s += $2 } END { print s }' "$dir"/agent.[0-9]*)
used=$(awk '$1 == "frame" { print $2 }' "$dir"/agent.[0-9]* | sort -u | wc -l)
looked=$(awk '$1 == "looked_up" { s += $2 } END { print s }' "$dir"/agent.[0-9]*)
hit=$(awk '$1 == "hit" { s += $2 } END { print s }' "$dir"/agent.[0-9]*)

echo
echo "$agents agents x $turns turns in ${secs}s; every agent now maps its whole conversation:"
awk -v p="$private" -v u="$used" -v l="$looked" -v h="$hit" 'BEGIN {
	printf "  %-46s %8d\n", "frames needed without sharing (private copies)", p
	printf "  %-46s %8d\n", "frames kvmm uses (distinct frames mapped)", u
	printf "  %-46s %7.1f%%\n", "saved", 100 * (1 - u / p)
	printf "  %-46s %7.1f%%  (%d of %d prompt tokens)\n", "prefix hit rate", 100 * h / l, h, l
	printf "  %-46s %8d\n", "hit tokens whose KV bytes were verified", h
}'

# let the agents go: opening the FIFO for writing releases their open(), closing it EOFs them
exec 3>"$dir/go"
exec 3>&-
for p in "${agent_pids[@]}"; do
	wait "$p" || { cat "$dir"/agent.*.err >&2; fail "an agent failed"; }
done
agent_pids=()

kill -TERM "$daemon"
rc=0
wait "$daemon" || rc=$?
daemon=""
[ "$rc" -eq 0 ] || fail "kvmmd exited with status $rc after SIGTERM"
echo "kvmmd stopped cleanly (SIGTERM, exit 0)"

echo
echo "== the same workload on the core library in one process (no daemon)"
./tools/kvmm-demo --agents "$agents" --turns "$turns"
