// SPDX-License-Identifier: MIT
/*
 * tools/bench_agents.c - the agents suite: LLM agent processes sharing one kvmm pool.
 *
 * The work is done by the Python driver tools/kvmm-agents (kvmm/llm/agents.py): an
 * orchestrator and 4 agent processes, each a kvmm.llm engine on a tiny checkpoint, attached to
 * a kvmmd it starts in a temporary directory.  The workload is fixed so that the ratios mean
 * the same from run to run: system prompt + tool descriptions 2048 tokens, an instruction of
 * 128 tokens per agent, answers of 64 greedy tokens, 2 rounds, round 2 carrying round 1's
 * instructions and answers.  It runs in three modes on identical inputs - shared (one
 * namespace), private (a namespace per agent: the baseline), pressure (shared, in a pool of
 * half the shared peak, or one task's pages and kvswapd's free frames when half is less, with
 * a swap tier and working-set admission) - and reports, measured in the same run: peak frames shared/private, tokens/s shared/private
 * and pressure/shared, and the critical agent's time to first token under pressure against
 * the shared mode.  --quick runs the modes once, otherwise three times (each figure the
 * median run).
 *
 * This suite forks the driver with --bench-rows and turns its tab-separated lines into rows,
 * notes and targets ("row NAME VALUE UNIT BASELINE BASELINE_VALUE", "note TEXT", "target WHAT
 * VALUE LIMIT UPPER UNIT").  The driver is found beside this program (tools/), kvmmd and
 * libkvmm.so in the build tree around it; $KVMM_AGENTS, $KVMM_KVMMD, $KVMM_LIB and
 * $KVMM_PYTHON (default /usr/bin/python3) override them.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"

/* The directory of this program, with a trailing '/', into @buf. */
static int exe_dir(char *buf, size_t len)
{
	ssize_t n = readlink("/proc/self/exe", buf, len - 1);
	char *slash;

	if (n < 0)
		return -errno;
	buf[n] = '\0';
	slash = strrchr(buf, '/');
	if (!slash)
		return -ENOENT;
	slash[1] = '\0';
	return 0;
}

/* setenv(@name, @dir + @rel) unless @name is set already. */
static void default_env(const char *name, const char *dir, const char *rel)
{
	char path[PATH_MAX];

	if (getenv(name))
		return;
	if (snprintf(path, sizeof(path), "%s%s", dir, rel) >= (int)sizeof(path))
		return;
	if (access(path, F_OK) == 0)
		setenv(name, path, 0);
}

/* Split @line at tabs into at most @max fields (in place); returns how many. */
static int split(char *line, char **f, int max)
{
	int n = 0;
	char *p = line;

	line[strcspn(line, "\n")] = '\0';
	while (n < max) {
		f[n++] = p;
		p = strchr(p, '\t');
		if (!p)
			break;
		*p++ = '\0';
	}
	return n;
}

static int parse_line(char *line)
{
	char *f[7];
	int n = split(line, f, 7);

	if (n == 6 && !strcmp(f[0], "row")) {
		bench_report(f[1], strtod(f[2], NULL), f[3], f[4], strtod(f[5], NULL));
		return 1;
	}
	if (n == 6 && !strcmp(f[0], "target")) {
		bench_target(f[1], strtod(f[2], NULL), strtod(f[3], NULL), atoi(f[4]) != 0, f[5]);
		return 0;
	}
	if (n >= 2 && !strcmp(f[0], "note")) {
		bench_note("%s", f[1]);
		return 0;
	}
	fprintf(stderr, "kvmm-bench: agents: a line the driver should not print: %s\n", f[0]);
	return -EPROTO;
}

int bench_suite_agents(const struct bench_opts *o)
{
	char dir[PATH_MAX], driver[PATH_MAX], line[1024];
	const char *python = getenv("KVMM_PYTHON") ? getenv("KVMM_PYTHON") : "/usr/bin/python3";
	int pfd[2], status, ret, rows = 0, bad = 0;
	FILE *in;
	pid_t pid;

	ret = exe_dir(dir, sizeof(dir));
	if (ret)
		return ret;
	if (getenv("KVMM_AGENTS"))
		ret = snprintf(driver, sizeof(driver), "%s", getenv("KVMM_AGENTS"));
	else
		ret = snprintf(driver, sizeof(driver), "%skvmm-agents", dir);
	if (ret >= (int)sizeof(driver))
		return -ENAMETOOLONG;
	if (access(driver, R_OK)) {
		fprintf(stderr, "kvmm-bench: agents: no driver at %s (set KVMM_AGENTS)\n", driver);
		return -ENOENT;
	}
	default_env("KVMM_KVMMD", dir, "../kvmm/kvmmd");
	default_env("KVMM_LIB", dir, "../runtime/libkvmm.so");
	if (pipe(pfd))
		return -errno;
	fflush(NULL);
	pid = fork();
	if (pid < 0) {
		ret = -errno;
		close(pfd[0]);
		close(pfd[1]);
		return ret;
	}
	if (pid == 0) {
		/* stdout is the rows; the driver's progress goes to stderr as it is */
		dup2(pfd[1], STDOUT_FILENO);
		close(pfd[0]);
		close(pfd[1]);
		execl(python, python, driver, "--bench-rows", "--agents", "4", "--rounds", "2",
		      "--system-tokens", "512", "--tool-tokens", "1536", "--instruction-tokens",
		      "128", "--answer-tokens", "64", "--reps", o->quick ? "1" : "3", (char *)NULL);
		fprintf(stderr, "kvmm-bench: agents: cannot run %s: %s\n", python, strerror(errno));
		_exit(127);
	}
	close(pfd[1]);
	in = fdopen(pfd[0], "r");
	if (!in) {
		ret = -errno;
		close(pfd[0]);
		waitpid(pid, &status, 0);
		return ret;
	}
	while (fgets(line, sizeof(line), in)) {
		ret = parse_line(line);
		if (ret < 0)
			bad = 1;
		else
			rows += ret;
	}
	fclose(in);
	if (waitpid(pid, &status, 0) < 0)
		return -errno;
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		/* 1 with rows: the outputs differed between the modes (the driver's note says so) */
		fprintf(stderr, "kvmm-bench: agents: the driver failed (%s %d)\n",
			WIFEXITED(status) ? "status" : "signal",
			WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
		return -EIO;
	}
	if (bad || rows < 4)
		return -EPROTO;
	return 0;
}
