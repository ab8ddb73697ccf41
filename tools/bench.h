/* SPDX-License-Identifier: MIT */
/*
 * tools/bench.h - the small measurement framework behind kvmm-bench.
 *
 * A suite (bench_core.c, later ipc, swap, attn) describes each thing it measures as a
 * struct bench_case: a run() doing n iterations of the work, with optional untimed setup()
 * and teardown() around every batch (so a case can prepare n sequences, or give back the
 * frames it took, without paying for it).  bench_measure() sizes a batch to a target time,
 * warms up, then times several batches and returns the median time per item: the median,
 * not the mean, because these machines are shared and noisy.  Results are added as rows
 * (name, value, unit, baseline name, baseline value) and printed at the end as one table,
 * or with --json as one JSON array.  Every row is measured beside its baseline in the same
 * run; the ratio is value / baseline_value.
 */
#ifndef KVMM_TOOLS_BENCH_H
#define KVMM_TOOLS_BENCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct bench_opts {
	bool json;  /* print a JSON array instead of a table */
	bool quick; /* CI-sized: smaller pools, shorter batches, fewer repetitions */
};

struct bench_case {
	const char *name;			 /* for error messages */
	void (*setup)(void *arg, uint64_t n);	 /* untimed, before each batch; may be NULL */
	void (*run)(void *arg, uint64_t n);	 /* timed: n iterations */
	void (*teardown)(void *arg, uint64_t n); /* untimed, after each batch; may be NULL */
	void *arg;
	uint64_t max_batch;	 /* most iterations one batch may hold; 0 = no limit */
	uint32_t items_per_iter; /* items (pages, blocks) one iteration handles; 0 = 1 */
};

/* Monotonic clock in nanoseconds. */
uint64_t bench_now_ns(void);

/* The median of @n values (sorts them in place); 0 for none. */
double bench_median(double *v, unsigned int n);

/* Median nanoseconds per item of @c over several timed batches. */
double bench_measure(const struct bench_opts *o, const struct bench_case *c);

/* Add a result row; ratio = value / baseline_value (null in JSON when the baseline is 0). */
void bench_report(const char *name, double value, const char *unit, const char *baseline,
		  double baseline_value);

/*
 * A line of context (what was measured on what, a comparison that is not a row), printed
 * after the table, or to stderr with --json so that stdout stays one JSON array.
 */
void bench_note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* A target line (e.g. "magazine alloc+free <= 50 ns/page: met"), printed after the table. */
void bench_target(const char *what, double value, double limit, bool upper, const char *unit);

/* Print every row (table or JSON) and every target line. */
void bench_print(const struct bench_opts *o);

/* Keep a value or the memory behind a pointer alive: the compiler must assume it is read. */
static inline void bench_use(uint64_t v)
{
	__asm__ __volatile__("" : : "r"(v) : "memory");
}

static inline void bench_use_ptr(const void *p)
{
	__asm__ __volatile__("" : : "r"(p) : "memory");
}

/* The attn suite's format (bench_attn.c, bench_attn_steps.c): one layer, fp16, GQA 4. */
#define ATTN_KV_HEADS 8
#define ATTN_HEAD_DIM 128
#define ATTN_Q_HEADS 32

/*
 * The request flow of the flow suites (bench_flow.c in process, bench_flow_ipc.c from client
 * processes of kvmmd): 1024-token prompts, 512 shared by all requests and 512 of their own,
 * pages of 16 tokens (4 KiB frames, 1 layer, 1 KV head, head dim 64, fp16), 8192 frames.
 */
#define FLOW_TOKENS 1024
#define FLOW_SHARED 512
#define FLOW_TPP 16
#define FLOW_PAGE_SIZE 4096
#define FLOW_FRAMES 8192
#define FLOW_FORMAT                                                                  \
	{                                                                            \
		.layers = 1, .kv_heads = 1, .head_dim = 64, .dtype = KVMM_DTYPE_FP16 \
	}

/*
 * The prompt of request @req of client @client: the shared part, then its own tokens, whose
 * first id is unique to (client, req) (keys chain, so every own block is new content).
 */
static inline void bench_flow_prompt(uint32_t *tok, uint32_t client, uint32_t req)
{
	for (uint32_t i = 0; i < FLOW_SHARED; i++)
		tok[i] = 0x40000000u + i;
	tok[FLOW_SHARED] = ((client & 0xffu) << 22) | (req & 0x3fffffu);
	for (uint32_t i = FLOW_SHARED + 1; i < FLOW_TOKENS; i++)
		tok[i] = i;
}

/*
 * kvmmd for the client suites (bench_ipc.c; libkvmm programs only): ./kvmm/kvmmd (or
 * $KVMM_KVMMD) in a temporary directory with one namespace "bench" of @frames frames of
 * @page_size bytes, ready when bench_kvmmd_start returns 0; -ENOENT when it is not built.
 */
struct bench_kvmmd {
	int pid;
	char dir[64], sock[128];
	const char *ns2; /* set before start: a second namespace of that name, the same size */
};
int bench_kvmmd_start(struct bench_kvmmd *d, const char *page_size, const char *frames);
void bench_kvmmd_stop(struct bench_kvmmd *d);

/* A suite of a benchmark program: its name on the command line, one line of help, its run. */
struct bench_suite {
	const char *name;
	const char *help;
	int (*run)(const struct bench_opts *o);
};

/*
 * The command line of a benchmark program (bench_main.c) over its @nr suites: parse, run the
 * named suites (the only one when @nr is 1 and none is named), print.  @elsewhere, when not
 * NULL, is added to the unknown-suite message.  Returns the exit status.
 */
int bench_main(const char *prog, const struct bench_suite *suites, size_t nr, const char *elsewhere,
	       int argc, char **argv);

/* Suites: 0, or a negative errno after printing why. */
int bench_suite_core(const struct bench_opts *o);
int bench_suite_attn(const struct bench_opts *o);     /* bench_attn.c */
int bench_attn_steps(const struct bench_opts *o);     /* bench_attn_steps.c: part of attn */
int bench_suite_wprotect(const struct bench_opts *o); /* bench_wprotect.c: read-only pages */
int bench_suite_ipc(const struct bench_opts *o);      /* bench_ipc.c: starts ./kvmm/kvmmd */
int bench_suite_swap(const struct bench_opts *o);     /* bench_swap.c: tiers, fio, replay */
int bench_suite_flow(const struct bench_opts *o); /* bench_flow.c: the request flow in process */
int bench_suite_flow_ipc(const struct bench_opts *o); /* bench_flow_ipc.c: from client processes */
/* bench_agents.c: LLM agent processes on one pool (runs the Python driver tools/kvmm-agents) */
int bench_suite_agents(const struct bench_opts *o);
int bench_suite_remote(const struct bench_opts *o); /* bench_remote.c: the remote tier */

#endif /* KVMM_TOOLS_BENCH_H */
