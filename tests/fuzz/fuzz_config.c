// SPDX-License-Identifier: MIT
/*
 * tests/fuzz/fuzz_config.c - libFuzzer harness: kvmmd's configuration file parser.
 *
 * The input is configuration text (a NUL is added; bytes after an embedded NUL are not
 * seen, as the parser sees a C string).  Parsing and finalizing either succeed or fail with
 * -errno and a message; both must leave a configuration that prints, and a message that is
 * a terminated string.  Built and run by tools/fuzz (Documentation/dev-tools/fuzzing.md).
 *
 * fuzz-libs: kvmm/built-in.a kvmm/backend/built-in.a lib/built-in.a
 * fuzz-ldlibs: -lxxhash -luring -lpthread
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvmm/config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct kvmm_config cfg;
	char err[512], *text;
	FILE *devnull;
	int ret;

	if (size > (1u << 16))
		return -1; /* longer inputs only find the same paths slower */
	text = malloc(size + 1);
	if (!text)
		return 0;
	memcpy(text, data, size);
	text[size] = '\0';

	kvmm_config_init(&cfg);
	err[0] = '\0';
	ret = kvmm_config_parse(&cfg, "fuzz.conf", text, err, sizeof(err));
	if (ret && ret != -EINVAL && ret != -ENOENT && ret != -ERANGE && ret != -ENAMETOOLONG &&
	    ret != -E2BIG && ret != -EEXIST)
		abort(); /* an error code the callers do not expect */
	if (ret && !memchr(err, '\0', sizeof(err)))
		abort();
	if (!ret) {
		err[0] = '\0';
		(void)kvmm_config_finalize(&cfg, 1000, err, sizeof(err));
		if (!memchr(err, '\0', sizeof(err)))
			abort();
	}
	devnull = fopen("/dev/null", "w");
	if (devnull) {
		kvmm_config_print(&cfg, devnull);
		fclose(devnull);
	}
	free(text);
	return 0;
}
