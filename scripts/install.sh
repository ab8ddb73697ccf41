#!/bin/sh
# scripts/install.sh - `make install` and `make uninstall` (the Makefile passes every variable).
#
#   install.sh install|uninstall
#
# Environment (all set by the Makefile): srctree, objtree, VERSION, KVMM_HAVE_CUDA, DESTDIR,
# PREFIX, BINDIR, SBINDIR, LIBDIR, INCLUDEDIR, PKGCONFIGDIR, MANDIR, UNITDIR.
#
# What goes where (Documentation/userspace-api/layering.md):
#   LIBDIR        libkvmm.so.VERSION, libkvmm.so.0 -> it (the SONAME), libkvmm.so -> .so.0,
#                 libkvmm.a
#   PKGCONFIGDIR  kvmm.pc
#   INCLUDEDIR/kvmm/  kvmm.h (runtime/kvmm.h), uapi.h (uapi/kvmm.h), format.h
#                 (include/format.h), kernels.h (kernels/kernels.h), kvmm_cuda.h (CUDA builds);
#                 their includes of each other rewritten to <kvmm/...>
#   SBINDIR       kvmmd;  BINDIR  kvmmctl
#   MANDIR/manN/  every man page of Documentation/ (in a man/ or manN/ directory), N in 1 3 5 8
#   UNITDIR       kvmmd.service, its ExecStart pointing at SBINDIR
set -eu
mode=${1:?usage: install.sh install|uninstall}
: "${srctree:?}" "${objtree:?}" "${VERSION:?}" "${PREFIX:?}" "${LIBDIR:?}" "${INCLUDEDIR:?}"
: "${BINDIR:?}" "${SBINDIR:?}" "${PKGCONFIGDIR:?}" "${MANDIR:?}" "${UNITDIR:?}"
DESTDIR=${DESTDIR:-}
cuda=${KVMM_HAVE_CUDA:-}

# public headers: installed name, source path
headers="kvmm.h:runtime/kvmm.h uapi.h:uapi/kvmm.h format.h:include/format.h kernels.h:kernels/kernels.h"
[ "$cuda" = y ] && headers="$headers kvmm_cuda.h:kernels/cuda/kvmm_cuda.h"

# "SECTION PATH" of every man page: Documentation/**/man/ or man<N>/, section from the suffix
man_pages() {
	find "$srctree/Documentation" -type f -name '*.[1358]' \( -path '*/man/*' -o -path '*/man[1358]/*' \) |
		sort | while read -r f; do
		echo "${f##*.} $f"
	done
}

d() { echo "$DESTDIR$1"; }

say() { echo "  INSTALL $1"; }

if [ "$mode" = uninstall ]; then
	rm -f "$(d "$LIBDIR")/libkvmm.so.$VERSION" "$(d "$LIBDIR")/libkvmm.so.0" \
		"$(d "$LIBDIR")/libkvmm.so" "$(d "$LIBDIR")/libkvmm.a" "$(d "$PKGCONFIGDIR")/kvmm.pc" \
		"$(d "$SBINDIR")/kvmmd" "$(d "$BINDIR")/kvmmctl" "$(d "$UNITDIR")/kvmmd.service"
	for h in $headers kvmm_cuda.h:; do # whatever this build's CUDA setting
		rm -f "$(d "$INCLUDEDIR")/kvmm/${h%%:*}"
	done
	rmdir "$(d "$INCLUDEDIR")/kvmm" 2>/dev/null || true
	man_pages | while read -r n f; do
		rm -f "$(d "$MANDIR")/man$n/$(basename "$f")"
	done
	echo "  UNINSTALL kvmm from $DESTDIR$PREFIX"
	exit 0
fi
[ "$mode" = install ] || {
	echo "install.sh: unknown mode '$mode'" >&2
	exit 2
}

for f in runtime/libkvmm.so runtime/libkvmm.a kvmm/kvmmd tools/kvmmctl; do
	[ -f "$objtree/$f" ] || {
		echo "install.sh: $f is not built (run make first)" >&2
		exit 1
	}
done

# the library: the real file named by version, the SONAME link, the link the linker finds
say "$LIBDIR/libkvmm.so.$VERSION"
install -d "$(d "$LIBDIR")" "$(d "$PKGCONFIGDIR")"
install -m 0755 "$objtree/runtime/libkvmm.so" "$(d "$LIBDIR")/libkvmm.so.$VERSION"
ln -sf "libkvmm.so.$VERSION" "$(d "$LIBDIR")/libkvmm.so.0"
ln -sf libkvmm.so.0 "$(d "$LIBDIR")/libkvmm.so"
say "$LIBDIR/libkvmm.a"
install -m 0644 "$objtree/runtime/libkvmm.a" "$(d "$LIBDIR")/libkvmm.a"

# libkvmm.a's own needs, for pkg-config --static
private="-lpthread -lm"
[ "$cuda" = y ] && private="$private -ldl"
say "$PKGCONFIGDIR/kvmm.pc"
cat >"$(d "$PKGCONFIGDIR")/kvmm.pc" <<PC
prefix=$PREFIX
libdir=$LIBDIR
includedir=$INCLUDEDIR

Name: kvmm
Description: KV-cache memory manager: libkvmm, the client of kvmmd, with the attention kernels
Version: $VERSION
Libs: -L\${libdir} -lkvmm
Libs.private: $private
Cflags: -I\${includedir}
PC

# headers: "uapi/kvmm.h" and the like become <kvmm/uapi.h>; nothing else may be included
install -d "$(d "$INCLUDEDIR")/kvmm"
rewrite=$(mktemp /tmp/kvmm-install.XXXXXX)
trap 'rm -f "$rewrite"' EXIT
for h in $headers; do
	src=${h#*:}
	# include/ is on the build's include path: include/format.h is included as "format.h"
	echo "s|#include \"${src#include/}\"|#include <kvmm/${h%%:*}>|"
done >"$rewrite"
for h in $headers; do
	dst=$(d "$INCLUDEDIR")/kvmm/${h%%:*}
	say "$INCLUDEDIR/kvmm/${h%%:*}"
	sed -f "$rewrite" "$srctree/${h#*:}" >"$dst.tmp"
	if grep -n '#include "' "$dst.tmp" >&2; then
		rm -f "$dst.tmp"
		echo "install.sh: ${h#*:} includes a header that is not installed (above)" >&2
		exit 1
	fi
	chmod 0644 "$dst.tmp"
	mv "$dst.tmp" "$dst"
done

say "$SBINDIR/kvmmd"
install -d "$(d "$SBINDIR")" "$(d "$BINDIR")"
install -m 0755 "$objtree/kvmm/kvmmd" "$(d "$SBINDIR")/kvmmd"
say "$BINDIR/kvmmctl"
install -m 0755 "$objtree/tools/kvmmctl" "$(d "$BINDIR")/kvmmctl"

man_pages | while read -r n f; do
	install -d "$(d "$MANDIR")/man$n"
	install -m 0644 "$f" "$(d "$MANDIR")/man$n/$(basename "$f")"
done
say "$MANDIR/man[1358]/ ($(man_pages | wc -l) pages)"

say "$UNITDIR/kvmmd.service"
install -d "$(d "$UNITDIR")"
sed "s|^ExecStart=/usr/local/sbin/kvmmd|ExecStart=$SBINDIR/kvmmd|" \
	"$srctree/tools/systemd/kvmmd.service" >"$(d "$UNITDIR")/kvmmd.service"
chmod 0644 "$(d "$UNITDIR")/kvmmd.service"
