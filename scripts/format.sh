#!/bin/sh
# scripts/format.sh - clang-format over kvmm's C sources (.clang-format: kernel style).
#
#   format.sh --check SRCTREE   dry run; lists each file that is not formatted, exit 1
#   format.sh --fix SRCTREE     reformat in place
set -eu
mode=${1:?usage: format.sh --check|--fix SRCTREE}
srctree=${2:?usage: format.sh --check|--fix SRCTREE}
cd "$srctree"
command -v clang-format >/dev/null || {
	echo "format: clang-format not found; run 'make deps'" >&2
	exit 2
}
# Tracked and new (not ignored) C files; generated files are ignored by git.
files=$(git ls-files --cached --others --exclude-standard -- '*.c' '*.h' '*.cu' '*.cuh' '*.cc' 2>/dev/null ||
	find . -name '*.[ch]' -not -path './include/generated/*')
[ -n "$files" ] || exit 0
case "$mode" in
--fix)
	echo "$files" | xargs clang-format -i
	;;
--check)
	bad=0
	for f in $files; do
		if ! clang-format --dry-run --Werror "$f" >/dev/null 2>&1; then
			echo "format: $f is not clang-formatted (run 'make format')"
			bad=1
		fi
	done
	[ "$bad" -eq 0 ] && echo "format: all $(echo "$files" | wc -l) files are clang-formatted"
	exit $bad
	;;
*)
	echo "format.sh: unknown mode '$mode'" >&2
	exit 2
	;;
esac
