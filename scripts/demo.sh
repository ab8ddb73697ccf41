#!/bin/sh
# scripts/demo.sh - `make demo`: the end-to-end demonstration of what kvmm does today.
#
# kvmmd (the daemon) has not landed yet, so the demo runs the kvmm core library in one
# process: several agents share a system prompt through the prefix page cache.  When the
# daemon lands this script starts it in a temporary directory and runs agent processes.
set -eu
demo=./tools/kvmm-demo
if [ ! -x "$demo" ]; then
	echo "demo: $demo was not built" >&2
	exit 1
fi
echo "== kvmm demo: multi-agent prefix sharing (core library, in-process)"
exec "$demo" "$@"
