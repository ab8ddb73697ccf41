// SPDX-License-Identifier: MIT
/*
 * tools/kvmm-bench-ipc.c - the ipc benchmark (bench_ipc.c): what talking to kvmmd costs a
 * client process.  A program of its own because it is what an engine is, a libkvmm client,
 * and links libkvmm and nothing of kvmm/ (tools/Kbuild); kvmm-bench's other suites measure the
 * daemon's internals in process.
 *
 *   kvmm-bench-ipc [--json] [--quick] ipc | flow | wprotect...
 *
 * wprotect (bench_wprotect.c) is what write-protected pool pages cost an engine.
 */
#include <stdlib.h>

#include "bench.h"

static const struct bench_suite suites[] = {
	{"ipc", "client to kvmmd: op round trip, 64-seq step on the rings, magazine alloc",
	 bench_suite_ipc},
	{"flow", "a request's flow from 1-8 client processes, sync and async, vs in process",
	 bench_suite_flow_ipc},
	{"wprotect", "read-only pool pages on and off: decode steps, prefills",
	 bench_suite_wprotect},
};

int main(int argc, char **argv)
{
	return bench_main("kvmm-bench-ipc", suites, sizeof(suites) / sizeof(suites[0]), NULL, argc,
			  argv);
}
