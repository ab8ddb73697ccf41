// SPDX-License-Identifier: MIT
/*
 * tools/bench_main.c - the command line of kvmm's benchmark programs, shared by kvmm-bench
 * (suites over kvmmd's internals and the kernels) and kvmm-bench-ipc (a libkvmm client of the
 * real kvmmd, linked with libkvmm alone):
 *
 *   PROG [--json] [--quick] SUITE...
 *
 * Each suite measures a part of kvmm next to a baseline measured in the same run and adds
 * rows; after the last suite every row is printed as one table, or with --json as one JSON
 * array on stdout.  A program with one suite runs it when none is named.
 * Exit: 0 done, 1 a suite failed, 2 usage error.
 */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "bench.h"

static void usage(FILE *f, const char *prog, const struct bench_suite *suites, size_t nr)
{
	fprintf(f,
		"usage: %s [--json] [--quick] %s\n"
		"\n"
		"  --json    print the results as a JSON array of\n"
		"            {\"name\", \"value\", \"unit\", \"baseline\", \"baseline_value\", "
		"\"ratio\"}\n"
		"  --quick   CI-sized run: smaller pools, shorter batches, fewer repetitions\n"
		"  --help    this text\n"
		"\n"
		"suites:\n",
		prog, nr == 1 ? "[SUITE]" : "SUITE...");
	for (size_t i = 0; i < nr; i++)
		fprintf(f, "  %-8s  %s\n", suites[i].name, suites[i].help);
	fprintf(f, "\nratio = value / baseline_value (both measured in this run).\n"
		   "See Documentation/benchmarks/kvmm-bench.md.\n");
}

static const struct bench_suite *find_suite(const struct bench_suite *suites, size_t nr,
					    const char *name)
{
	for (size_t i = 0; i < nr; i++)
		if (!strcmp(suites[i].name, name))
			return &suites[i];
	return NULL;
}

static int run_suite(const char *prog, const struct bench_suite *s, const struct bench_opts *o)
{
	int ret = s->run(o);

	if (ret)
		fprintf(stderr, "%s: suite %s failed: %s\n", prog, s->name, strerror(-ret));
	return ret;
}

int bench_main(const char *prog, const struct bench_suite *suites, size_t nr, const char *elsewhere,
	       int argc, char **argv)
{
	static const struct option longopts[] = {
		{"json", no_argument, NULL, 'j'},
		{"quick", no_argument, NULL, 'q'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	struct bench_opts o = {0};
	int c, ret = 0;

	while ((c = getopt_long(argc, argv, "jqh", longopts, NULL)) != -1) {
		switch (c) {
		case 'j':
			o.json = true;
			break;
		case 'q':
			o.quick = true;
			break;
		case 'h':
			usage(stdout, prog, suites, nr);
			return 0;
		default:
			usage(stderr, prog, suites, nr);
			return 2;
		}
	}
	if (optind == argc && nr != 1) {
		fprintf(stderr, "%s: no suite given\n", prog);
		usage(stderr, prog, suites, nr);
		return 2;
	}
	/* check every name before running anything: a typo should not cost a whole run */
	for (int i = optind; i < argc; i++) {
		if (!find_suite(suites, nr, argv[i])) {
			fprintf(stderr, "%s: unknown suite '%s' (suites:", prog, argv[i]);
			for (size_t s = 0; s < nr; s++)
				fprintf(stderr, " %s", suites[s].name);
			fprintf(stderr, ")%s%s\n", elsewhere ? "; " : "",
				elsewhere ? elsewhere : "");
			return 2;
		}
	}
	if (optind == argc)
		ret = run_suite(prog, &suites[0], &o); /* the one suite (checked above) */
	for (int i = optind; i < argc && !ret; i++)
		ret = run_suite(prog, find_suite(suites, nr, argv[i]), &o);
	if (ret)
		return 1;
	bench_print(&o);
	return 0;
}
