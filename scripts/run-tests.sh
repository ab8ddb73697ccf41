#!/bin/bash
# scripts/run-tests.sh - run kvmm's test programs and sum up their results.
#
#   run-tests.sh TEST...
#
# A TEST is a program relative to the current directory (the object tree) or a script given
# by its absolute path (the source tree's test-script-y).
#
# Each test runs with its output shown as it comes.  cmocka's summary lines
# ("[  PASSED  ] N test(s).", "[  FAILED  ] N test(s)", "[  SKIPPED ] N test(s)") are
# counted; a program without them counts as one test: exit 0 passed, 77 skipped,
# anything else (a crash, a timeout, a sanitizer report) failed.  The last line is
# "N passed, N failed, N skipped"; the exit status is 1 when anything failed.
#
# KVMM_TEST_TIMEOUT (seconds, default 600) bounds each program.
set -u

timeout_s=${KVMM_TEST_TIMEOUT:-600}
export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=0:detect_leaks=1:halt_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
# SAN=thread: the first race fails the program (a daemon's kills it: the test sees it gone)
# (scripts/tsan.supp: reports that are not bugs, each with its reason)
tsan_supp=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/tsan.supp
export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1:suppressions=${tsan_supp}}

passed=0 failed=0 skipped=0
failed_names=()
log=$(mktemp /tmp/kvmm-test.XXXXXX)
trap 'rm -f "$log"' EXIT

for t in "$@"; do
	echo "=== ${t}"
	start=$(date +%s.%N)
	case $t in
	/*) cmd=$t ;;  # a test script of the source tree (test-script-y)
	*) cmd=./$t ;; # a test program of the object tree
	esac
	timeout --kill-after=10 "$timeout_s" "$cmd" 2>&1 | tee "$log"
	rc=${PIPESTATUS[0]}
	secs=$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }')
	p=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' "$log" | awk '{ s += $1 } END { print s + 0 }')
	f=$(sed -n 's/^\[  FAILED  \] \([0-9]*\) test.*/\1/p' "$log" | awk '{ s += $1 } END { print s + 0 }')
	s=$(sed -n 's/^\[  SKIPPED \] \([0-9]*\) test.*/\1/p' "$log" | awk '{ s += $1 } END { print s + 0 }')
	counted=$((p + f + s))
	if [ "$counted" -eq 0 ]; then
		case $rc in
		0) p=1 ;;
		77) s=1 ;;
		*) f=1 ;;
		esac
	elif [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
		# cmocka said all passed but the program then failed (sanitizer, leak, crash)
		f=1
	fi
	passed=$((passed + p))
	failed=$((failed + f))
	skipped=$((skipped + s))
	if [ "$f" -ne 0 ]; then
		failed_names+=("$t (exit $rc)")
		echo "--- ${t}: FAILED (exit $rc, ${secs}s)"
	else
		echo "--- ${t}: ok (${secs}s)"
	fi
done

echo
if [ ${#failed_names[@]} -ne 0 ]; then
	echo "failed programs:"
	printf '  %s\n' "${failed_names[@]}"
fi
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
