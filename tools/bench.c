// SPDX-License-Identifier: MIT
/*
 * tools/bench.c - the measurement framework behind kvmm-bench (see bench.h).
 *
 * Timing: CLOCK_MONOTONIC around whole batches, never around one operation (a clock read
 * costs ~20 ns, as much as the fastest thing measured).  A batch is sized by doubling until
 * it takes the target time (these first batches double as warm-up: caches, branch
 * predictors, page faults of the pool), then one more warm-up batch, then `reps` timed
 * batches whose per-item times are sorted and the median taken.  Rows and target lines are
 * kept in static tables and printed at the end, so a suite can measure everything first and
 * a --json run prints nothing but the array on stdout.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"

#define MAX_ROWS 128
#define MAX_TARGETS 32
#define MAX_REPS 31

struct bench_row {
	char name[64];
	char unit[24];
	char baseline[64];
	double value;
	double baseline_value;
};

static struct bench_row rows[MAX_ROWS];
static unsigned int nr_rows;
static char targets[MAX_TARGETS][160];
static unsigned int nr_targets;
#define MAX_NOTES 32
static char notes[MAX_NOTES][240];
static unsigned int nr_notes;

uint64_t bench_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint64_t time_batch(const struct bench_case *c, uint64_t n)
{
	uint64_t t0, t1;

	if (c->setup)
		c->setup(c->arg, n);
	t0 = bench_now_ns();
	c->run(c->arg, n);
	t1 = bench_now_ns();
	if (c->teardown)
		c->teardown(c->arg, n);
	return t1 - t0;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

double bench_median(double *v, unsigned int n)
{
	if (!n)
		return 0;
	qsort(v, n, sizeof(*v), cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

double bench_measure(const struct bench_opts *o, const struct bench_case *c)
{
	uint64_t target = o->quick ? 2000000 : 20000000; /* ns per batch */
	unsigned int reps = o->quick ? 5 : 15;
	uint64_t max = c->max_batch ? c->max_batch : UINT64_MAX;
	uint32_t items = c->items_per_iter ? c->items_per_iter : 1;
	double per[MAX_REPS];
	uint64_t n = 1, t;

	/* size the batch: grow by up to 8x per step towards the target, never past max */
	for (;;) {
		uint64_t grow;

		t = time_batch(c, n);
		if (t >= target || n >= max)
			break;
		grow = t ? target / t + 1 : 8;
		if (grow < 2)
			grow = 2;
		if (grow > 8)
			grow = 8;
		n = n > max / grow ? max : n * grow;
	}
	time_batch(c, n); /* one more warm-up at the final size */

	for (unsigned int r = 0; r < reps; r++)
		per[r] = (double)time_batch(c, n) / ((double)n * items);
	qsort(per, reps, sizeof(per[0]), cmp_double);
	return per[reps / 2];
}

static void copy_str(char *dst, size_t len, const char *src)
{
	snprintf(dst, len, "%s", src ? src : "");
}

void bench_report(const char *name, double value, const char *unit, const char *baseline,
		  double baseline_value)
{
	struct bench_row *r;

	if (nr_rows == MAX_ROWS) {
		fprintf(stderr, "kvmm-bench: too many rows, %s dropped\n", name);
		return;
	}
	r = &rows[nr_rows++];
	copy_str(r->name, sizeof(r->name), name);
	copy_str(r->unit, sizeof(r->unit), unit);
	copy_str(r->baseline, sizeof(r->baseline), baseline);
	r->value = value;
	r->baseline_value = baseline_value;
}

void bench_note(const char *fmt, ...)
{
	va_list ap;

	if (nr_notes == MAX_NOTES)
		return;
	va_start(ap, fmt);
	vsnprintf(notes[nr_notes++], sizeof(notes[0]), fmt, ap);
	va_end(ap);
}

void bench_target(const char *what, double value, double limit, bool upper, const char *unit)
{
	bool met = upper ? value <= limit : value >= limit;

	if (nr_targets == MAX_TARGETS)
		return;
	snprintf(targets[nr_targets++], sizeof(targets[0]), "target: %s %s %g %s: %s (%.4g %s)",
		 what, upper ? "<=" : ">=", limit, unit, met ? "met" : "NOT met", value, unit);
}

/* Names and units are ours, but escape anyway so the output is always valid JSON. */
static void json_str(const char *s)
{
	putchar('"');
	for (; *s; s++) {
		unsigned char ch = (unsigned char)*s;

		if (ch == '"' || ch == '\\')
			printf("\\%c", ch);
		else if (ch < 0x20)
			printf("\\u%04x", ch);
		else
			putchar(ch);
	}
	putchar('"');
}

/* JSON has no NaN or infinity: those become null. */
static void json_num(double v)
{
	if (isfinite(v))
		printf("%.6g", v);
	else
		fputs("null", stdout);
}

static double ratio_of(const struct bench_row *r)
{
	return r->baseline_value != 0 ? r->value / r->baseline_value : NAN;
}

void bench_print(const struct bench_opts *o)
{
	if (o->json) {
		putchar('[');
		for (unsigned int i = 0; i < nr_rows; i++) {
			const struct bench_row *r = &rows[i];

			fputs(i ? ",\n " : "\n ", stdout);
			fputs("{\"name\": ", stdout);
			json_str(r->name);
			fputs(", \"value\": ", stdout);
			json_num(r->value);
			fputs(", \"unit\": ", stdout);
			json_str(r->unit);
			fputs(", \"baseline\": ", stdout);
			json_str(r->baseline);
			fputs(", \"baseline_value\": ", stdout);
			json_num(r->baseline_value);
			fputs(", \"ratio\": ", stdout);
			json_num(ratio_of(r));
			putchar('}');
		}
		fputs(nr_rows ? "\n]\n" : "]\n", stdout);
		/* stdout stays pure JSON; the notes and targets go to stderr */
		for (unsigned int i = 0; i < nr_notes; i++)
			fprintf(stderr, "%s\n", notes[i]);
		for (unsigned int i = 0; i < nr_targets; i++)
			fprintf(stderr, "%s\n", targets[i]);
		return;
	}

	printf("%-28s %12s %-12s %-24s %14s %8s\n", "name", "value", "unit", "baseline",
	       "baseline_value", "ratio");
	for (unsigned int i = 0; i < nr_rows; i++) {
		const struct bench_row *r = &rows[i];

		printf("%-28s %12.2f %-12s %-24s %14.2f %8.2f\n", r->name, r->value, r->unit,
		       r->baseline, r->baseline_value, ratio_of(r));
	}
	if (nr_notes || nr_targets)
		putchar('\n');
	for (unsigned int i = 0; i < nr_notes; i++)
		printf("%s\n", notes[i]);
	for (unsigned int i = 0; i < nr_targets; i++)
		printf("%s\n", targets[i]);
}
