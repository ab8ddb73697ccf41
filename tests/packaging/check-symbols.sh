#!/bin/sh
# tests/packaging/check-symbols.sh - libkvmm.so exports exactly its public API.
#
# Run by `make check` in the object tree (KVMM_SRCTREE: the source tree; KVMM_HAVE_CUDA: y when
# the CUDA kernels are built).  Fails when `nm -D --defined-only runtime/libkvmm.so` shows a
# symbol that tests/packaging/libkvmm.symbols does not list (an internal symbol leaked: mark
# it hidden, or declare it in a public header and list it) or misses one it lists; when the
# SONAME is not libkvmm.so.0; when an exported symbol has no KVMM_0 version; or when the
# library needs a library of the daemon's (jemalloc, xxhash, liburing).
set -eu
src=${KVMM_SRCTREE:?KVMM_SRCTREE: the source tree}
lib=runtime/libkvmm.so
list=$src/tests/packaging/libkvmm.symbols
cuda=${KVMM_HAVE_CUDA:-}
fail=0
tmp=$(mktemp -d /tmp/kvmm-symbols.XXXXXX)
trap 'rm -rf "$tmp"' EXIT

[ -f "$lib" ] || {
	echo "check-symbols: $lib is not built" >&2
	exit 1
}

# expected: the list without comments; "cuda: " lines only in a CUDA build
sed -e 's/#.*//' -e 's/[[:space:]]*$//' "$list" | while read -r a b; do
	case $a in
	'') ;;
	cuda:) [ "$cuda" = y ] && echo "$b" ;;
	*) echo "$a" ;;
	esac
done | sort -u >"$tmp/expected"

# exported: defined dynamic symbols, less the version node itself (type A)
nm -D --defined-only "$lib" | awk '$2 != "A" { print $3 }' | sed 's/@.*//' | sort -u >"$tmp/actual"

extra=$(comm -13 "$tmp/expected" "$tmp/actual")
missing=$(comm -23 "$tmp/expected" "$tmp/actual")
if [ -n "$extra" ]; then
	echo "check-symbols: $lib exports symbols that are not in $list:"
	echo "$extra" | sed 's/^/  /'
	fail=1
fi
if [ -n "$missing" ]; then
	echo "check-symbols: $lib does not export these symbols of $list:"
	echo "$missing" | sed 's/^/  /'
	fail=1
fi

# every export under the version node of runtime/libkvmm.map
unversioned=$(readelf --dyn-syms -W "$lib" | awk '$5 != "LOCAL" && $7 != "UND" && $8 ~ /^kvmm_/ && $8 !~ /@@KVMM_0$/ { print $8 }')
if [ -n "$unversioned" ]; then
	echo "check-symbols: exported without the KVMM_0 version: $unversioned"
	fail=1
fi

soname=$(readelf -d "$lib" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
if [ "$soname" != libkvmm.so.0 ]; then
	echo "check-symbols: SONAME is '$soname', not libkvmm.so.0"
	fail=1
fi

needed=$(readelf -d "$lib" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | tr '\n' ' ')
case " $needed" in
*" libjemalloc"* | *" libxxhash"* | *" liburing"*)
	echo "check-symbols: $lib needs a library of the daemon: $needed"
	fail=1
	;;
esac

if [ "$fail" -ne 0 ]; then
	echo "check-symbols: FAILED (see Documentation/userspace-api/layering.md)"
	exit 1
fi
echo "check-symbols: $lib exports the $(wc -l <"$tmp/actual") symbols of libkvmm.symbols," \
	"SONAME $soname, needs: $needed"
