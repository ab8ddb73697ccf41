// SPDX-License-Identifier: MIT
/*
 * tools/kvmm-bench-ipc.c - the ipc benchmark (bench_ipc.c): what talking to kvmmd costs a
 * client process.  A program of its own because it is what an engine is, a libkvmm client,
 * and links libkvmm and nothing of kvmm/ (tools/Kbuild); kvmm-bench's other suites measure the
 * daemon's internals in process.
 *
 *   kvmm-bench-ipc [--json] [--quick] [ipc] [wprotect]
 *
 * With no suite named it runs ipc. wprotect (bench_wprotect.c) is what write-protected pool
 * pages cost an engine.
 */
#include <stdlib.h>

#include "bench.h"

static const struct bench_suite suites[] = {
	{"ipc", "client to kvmmd: op round trip, 64-seq step on the rings, magazine alloc",
	 bench_suite_ipc},
	{"wprotect", "read-only pool pages on and off: decode steps, prefills",
	 bench_suite_wprotect},
};

int main(int argc, char **argv)
{
	char **args;
	int n = 0;

	/* no suite named (every argument an option): the ipc suite, as always */
	for (int i = 1; i < argc; i++)
		n += argv[i][0] != '-';
	if (n)
		return bench_main("kvmm-bench-ipc", suites, 2, NULL, argc, argv);
	args = calloc((size_t)argc + 2, sizeof(*args));
	if (!args)
		return 1;
	for (int i = 0; i < argc; i++)
		args[i] = argv[i];
	args[argc] = (char *)"ipc";
	return bench_main("kvmm-bench-ipc", suites, 2, NULL, argc + 1, args);
}
