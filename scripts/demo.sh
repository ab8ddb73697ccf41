#!/bin/bash
# scripts/demo.sh - `make demo`: LLM agents sharing one KV pool through the real kvmmd.
#
# Runs tools/kvmm-agents (kvmm/llm/agents.py): an orchestrator and 4 agent processes, each a
# kvmm.llm engine on the same checkpoint (a tiny one written in a temporary directory, or
# $KVMM_MODEL), 2 rounds, in the shared, private and pressure modes; each mode starts its own
# kvmmd in the temporary directory and stops it.  It prints, per mode, the prefill tokens
# computed and skipped, the frames at peak, wall time, tokens/s, time to first token per
# agent, preemptions and swap-ins, checks that every agent's output tokens are the same in
# the three modes (exit 1 otherwise) and ends with a summary table.
#
# Environment: KVMM_MODEL (a checkpoint directory), KVMM_DEMO_AGENTS (4), KVMM_DEMO_ROUNDS (2);
# KVMM_DEMO_ARGS: more kvmm-agents options.  `make demo-bookkeeping` is the page bookkeeping
# alone, without a model (scripts/demo-bookkeeping.sh).
set -euo pipefail

src=${KVMM_SRCTREE:-.}
python=${KVMM_PYTHON:-/usr/bin/python3}
for p in ./kvmm/kvmmd ./runtime/libkvmm.so; do
	[ -e "$p" ] || { echo "demo: $p was not built" >&2; exit 1; }
done
"$python" -c 'import torch' 2>/dev/null || {
	echo "demo: $python cannot import torch (make deps installs python3-torch)" >&2
	exit 1
}
export KVMM_KVMMD=$PWD/kvmm/kvmmd KVMM_LIB=$PWD/runtime/libkvmm.so
# shellcheck disable=SC2086 # KVMM_DEMO_ARGS is words
exec "$python" "$src/tools/kvmm-agents" --agents "${KVMM_DEMO_AGENTS:-4}" \
	--rounds "${KVMM_DEMO_ROUNDS:-2}" ${KVMM_DEMO_ARGS:-}
