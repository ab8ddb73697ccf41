/* SPDX-License-Identifier: MIT */
/*
 * tests/fuzz/fuzz_tmp.h - a harness's scratch directory (the server's socket, swap files),
 * removed with what is in it when the process exits normally: a libFuzzer run that ends,
 * or the seeds' replay in make check.  After a crash it stays, beside the evidence.
 */
#ifndef KVMM_TESTS_FUZZ_TMP_H
#define KVMM_TESTS_FUZZ_TMP_H

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char fz_tmp_dir[64];

static void fz_tmp_remove(void)
{
	DIR *d = opendir(fz_tmp_dir);
	struct dirent *e;
	char path[sizeof(fz_tmp_dir) + 256];

	if (!d)
		return;
	while ((e = readdir(d)))
		if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
			snprintf(path, sizeof(path), "%s/%s", fz_tmp_dir, e->d_name);
			unlink(path);
		}
	closedir(d);
	rmdir(fz_tmp_dir);
}

/* Make the directory (once per process; aborts if it cannot) and return its path. */
static inline const char *fz_tmp(const char *prefix)
{
	if (!fz_tmp_dir[0]) {
		snprintf(fz_tmp_dir, sizeof(fz_tmp_dir), "/tmp/%s.XXXXXX", prefix);
		if (!mkdtemp(fz_tmp_dir))
			abort();
		atexit(fz_tmp_remove);
	}
	return fz_tmp_dir;
}

#endif /* KVMM_TESTS_FUZZ_TMP_H */
