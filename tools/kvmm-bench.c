// SPDX-License-Identifier: MIT
/*
 * tools/kvmm-bench.c - kvmm's benchmark program over the daemon's internals and the kernels:
 * the table of suites (the command line is bench_main.c's).
 *
 *   kvmm-bench [--json] [--quick] SUITE...
 *
 * Each suite measures a part of kvmm next to a baseline measured in the same run.  Targets are
 * printed, never asserted: a benchmark on a shared machine is information, not a test.  The
 * ipc suite, a client of the real kvmmd, is its own program linked with libkvmm alone
 * (tools/kvmm-bench-ipc.c).
 */
#include "bench.h"

/* Add a suite here: one line, and a bench_<name>.c with its run function. */
static const struct bench_suite suites[] = {
	{"core", "allocator and page cache: alloc+free, cache insert and prefix lookup",
	 bench_suite_core},
	{"attn", "CPU paged decode attention vs contiguous KV and streaming-read bandwidth",
	 bench_suite_attn},
	{"swap", "swap tiers: host vs memcpy, NVMe vs fio; 2x oversubscribed decode replay",
	 bench_suite_swap},
	{"flow", "a request's flow (lookup, append, seal, free) on the core, in process",
	 bench_suite_flow},
	{"agents",
	 "4 LLM agent processes on one kvmmd: shared vs private namespaces, under pressure",
	 bench_suite_agents},
	{"remote",
	 "remote tier: a 4k-token prefix from a Redis Cluster vs the NVMe tier, memcpy "
	 "and recomputing it",
	 bench_suite_remote},
};

int main(int argc, char **argv)
{
	return bench_main("kvmm-bench", suites, sizeof(suites) / sizeof(suites[0]),
			  "the ipc suite is tools/kvmm-bench-ipc", argc, argv);
}
