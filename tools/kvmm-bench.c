// SPDX-License-Identifier: MIT
/*
 * tools/kvmm-bench.c - kvmm's benchmark program: command line and the table of suites.
 *
 *   kvmm-bench [--json] [--quick] SUITE...
 *
 * Each suite (core now; ipc, swap, attn as they land) measures a part of kvmm next to a
 * baseline measured in the same run and adds rows; after the last suite every row is
 * printed as one table, or with --json as one JSON array on stdout.  Targets are printed,
 * never asserted: a benchmark on a shared machine is information, not a test.
 * Exit: 0 done, 1 a suite failed, 2 usage error.
 */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "bench.h"

struct bench_suite {
	const char *name;
	const char *help;
	int (*run)(const struct bench_opts *o);
};

/* Add a suite here: one line, and a bench_<name>.c with its run function. */
static const struct bench_suite suites[] = {
	{"core", "allocator and page cache: alloc+free, cache insert and prefix lookup",
	 bench_suite_core},
	{"attn", "CPU paged decode attention vs contiguous KV and streaming-read bandwidth",
	 bench_suite_attn},
	{"ipc", "client to kvmmd: op round trip, 64-seq step on the rings, magazine alloc",
	 bench_suite_ipc},
	{"swap", "swap tiers: host vs memcpy, NVMe vs fio; 2x oversubscribed decode replay",
	 bench_suite_swap},
};

#define NR_SUITES (sizeof(suites) / sizeof(suites[0]))

static void usage(FILE *f)
{
	fprintf(f, "usage: kvmm-bench [--json] [--quick] SUITE...\n"
		   "\n"
		   "  --json    print the results as a JSON array of\n"
		   "            {\"name\", \"value\", \"unit\", \"baseline\", \"baseline_value\", "
		   "\"ratio\"}\n"
		   "  --quick   CI-sized run: smaller pools, shorter batches, fewer repetitions\n"
		   "  --help    this text\n"
		   "\n"
		   "suites:\n");
	for (size_t i = 0; i < NR_SUITES; i++)
		fprintf(f, "  %-8s  %s\n", suites[i].name, suites[i].help);
	fprintf(f, "\nratio = value / baseline_value (both measured in this run).\n"
		   "See Documentation/benchmarks/kvmm-bench.md.\n");
}

static const struct bench_suite *find_suite(const char *name)
{
	for (size_t i = 0; i < NR_SUITES; i++)
		if (!strcmp(suites[i].name, name))
			return &suites[i];
	return NULL;
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{"json", no_argument, NULL, 'j'},
		{"quick", no_argument, NULL, 'q'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	struct bench_opts o = {0};
	int c;

	while ((c = getopt_long(argc, argv, "jqh", longopts, NULL)) != -1) {
		switch (c) {
		case 'j':
			o.json = true;
			break;
		case 'q':
			o.quick = true;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind == argc) {
		fprintf(stderr, "kvmm-bench: no suite given\n");
		usage(stderr);
		return 2;
	}
	/* check every name before running anything: a typo should not cost a whole run */
	for (int i = optind; i < argc; i++) {
		if (!find_suite(argv[i])) {
			fprintf(stderr, "kvmm-bench: unknown suite '%s' (suites:", argv[i]);
			for (size_t s = 0; s < NR_SUITES; s++)
				fprintf(stderr, " %s", suites[s].name);
			fprintf(stderr, ")\n");
			return 2;
		}
	}
	for (int i = optind; i < argc; i++) {
		const struct bench_suite *s = find_suite(argv[i]);
		int ret = s->run(&o);

		if (ret) {
			fprintf(stderr, "kvmm-bench: suite %s failed: %s\n", s->name,
				strerror(-ret));
			return 1;
		}
	}
	bench_print(&o);
	return 0;
}
