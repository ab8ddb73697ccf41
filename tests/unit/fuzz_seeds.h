/* SPDX-License-Identifier: MIT */
/*
 * tests/unit/fuzz_seeds.h - a cmocka program that replays one fuzz harness's committed seeds
 * (the files of tests/fuzz/corpus/FUZZ_NAME/) through the harness itself, built by gcc like every other
 * test: so `make check` and `make check SAN=1` run every input that once crashed kvmmd,
 * without clang or libFuzzer (tools/fuzz --replay does the same with clang in CI).  The
 * including file defines FUZZ_NAME and includes the harness first.  A harness aborts on
 * what it finds, which fails the program.  The seeds are found under $KVMM_SRCTREE (make
 * check sets it), else the current directory.
 */
#ifndef KVMM_TESTS_UNIT_FUZZ_SEEDS_H
#define KVMM_TESTS_UNIT_FUZZ_SEEDS_H

#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cmocka.h>

static void test_seeds(void **state)
{
	const char *src = getenv("KVMM_SRCTREE");
	char dir[4096], path[4096 + 256];
	struct dirent **names;
	unsigned int replayed = 0;
	int n;

	(void)state;
	snprintf(dir, sizeof(dir), "%s/tests/fuzz/corpus/%s", src && *src ? src : ".", FUZZ_NAME);
	n = scandir(dir, &names, NULL, alphasort); /* sorted: the same order every run */
	if (n < 0)
		fail_msg("cannot read %s: %s", dir, strerror(errno));
	for (int i = 0; i < n; i++) {
		struct stat st;
		uint8_t *data;
		FILE *f;

		snprintf(path, sizeof(path), "%s/%s", dir, names[i]->d_name);
		free(names[i]);
		if (stat(path, &st) || !S_ISREG(st.st_mode))
			continue;
		data = malloc(st.st_size ? (size_t)st.st_size : 1);
		assert_non_null(data);
		f = fopen(path, "rb");
		assert_non_null(f);
		assert_int_equal(fread(data, 1, (size_t)st.st_size, f), (size_t)st.st_size);
		fclose(f);
		print_message("seed %s (%lld bytes)\n", path, (long long)st.st_size);
		(void)LLVMFuzzerTestOneInput(data, (size_t)st.st_size);
		free(data);
		replayed++;
	}
	free(names);
	print_message("%u seeds of fuzz_%s replayed\n", replayed, FUZZ_NAME);
	assert_true(replayed > 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_seeds),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

#endif /* KVMM_TESTS_UNIT_FUZZ_SEEDS_H */
