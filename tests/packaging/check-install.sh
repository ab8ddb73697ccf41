#!/bin/sh
# tests/packaging/check-install.sh - `make install` gives an engine all it needs, and
# `make uninstall` takes it back.
#
# Run by `make check` in the object tree (KVMM_SRCTREE, KVMM_MAKE: the make that builds this
# tree, KVMM_CC: its compiler, KVMM_SANITIZE: y in a sanitizer build).  Installs into a
# temporary DESTDIR with the default PREFIX, then, with nothing but what
# `PKG_CONFIG_PATH=... pkg-config --cflags --libs kvmm` says (PKG_CONFIG_SYSROOT_DIR maps the
# DESTDIR): compiles each installed header alone, builds tests/packaging/install_test.c
# (the format layer, a CPU decode checked against a reference, kvmm_strerror) and runs it
# against the installed libkvmm.so.0.  Checks the library's links, the unit's ExecStart, the
# man pages, and that uninstall leaves no file behind.
set -eu
src=${KVMM_SRCTREE:?KVMM_SRCTREE: the source tree}
make_cmd=${KVMM_MAKE:-make -f $src/Makefile}
cc=${KVMM_CC:-cc}
san=
[ "${KVMM_SANITIZE:-}" = y ] && san="-fsanitize=address,undefined -fno-sanitize-recover=undefined"
command -v pkg-config >/dev/null || {
	echo "check-install: pkg-config not found; run 'make deps'" >&2
	exit 1
}

tmp=$(mktemp -d /tmp/kvmm-install.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
root=$tmp/root
fail() {
	echo "check-install: $*" >&2
	exit 1
}

# shellcheck disable=SC2086 # make_cmd is a command line
$make_cmd install DESTDIR="$root" >"$tmp/install.log" 2>&1 || {
	cat "$tmp/install.log" >&2
	fail "make install DESTDIR=$root failed"
}

pc=$(find "$root" -name kvmm.pc)
[ "$(echo "$pc" | wc -l)" -eq 1 ] && [ -n "$pc" ] || fail "not one kvmm.pc installed: '$pc'"
grep -q "^prefix=/usr/local$" "$pc" || fail "kvmm.pc: prefix is not /usr/local (DESTDIR leaked?)"
export PKG_CONFIG_PATH="${pc%/kvmm.pc}" PKG_CONFIG_SYSROOT_DIR="$root"
cflags=$(pkg-config --cflags kvmm)
libs=$(pkg-config --libs kvmm)
# pkgconf prefixes variables with the sysroot, pkg-config 0.29 does not
in_root() { case $1 in "$root"/*) echo "$1" ;; *) echo "$root$1" ;; esac; }
libdir=$(in_root "$(pkg-config --variable=libdir kvmm)")
incdir=$(in_root "$(pkg-config --variable=includedir kvmm)")
case "$cflags $libs" in
*"$src"*) fail "pkg-config points into the source tree: $cflags $libs" ;;
esac

# the library: the real file, the SONAME link, the development link
[ -f "$libdir/libkvmm.a" ] || fail "no libkvmm.a in $libdir"
[ "$(readlink "$libdir/libkvmm.so")" = libkvmm.so.0 ] || fail "libkvmm.so is not a link to libkvmm.so.0"
real=$(readlink "$libdir/libkvmm.so.0")
case $real in libkvmm.so.0.*) ;; *) fail "libkvmm.so.0 links to '$real'" ;; esac
[ -f "$libdir/$real" ] && [ ! -L "$libdir/$real" ] || fail "$real is not a file"

# every public header compiles on its own, as C (and C++ where there is a compiler)
cxx=
case $cc in *clang*) cxx=clang++ ;; *) cxx=g++ ;; esac
command -v "$cxx" >/dev/null || cxx=
nh=0
for h in "$incdir"/kvmm/*.h; do
	name=kvmm/$(basename "$h")
	printf '#include <%s>\n' "$name" >"$tmp/one.c"
	# shellcheck disable=SC2086
	$cc -std=gnu11 -Wall -Wextra -Werror -fsyntax-only $cflags "$tmp/one.c" ||
		fail "<$name> does not compile alone as C"
	if [ -n "$cxx" ]; then
		cp "$tmp/one.c" "$tmp/one.cc"
		# shellcheck disable=SC2086
		$cxx -std=gnu++17 -Wall -Wextra -Werror -fsyntax-only $cflags "$tmp/one.cc" ||
			fail "<$name> does not compile alone as C++"
	fi
	nh=$((nh + 1))
done
[ "$nh" -ge 4 ] || fail "only $nh headers under $incdir/kvmm"

# an engine's program: pkg-config's flags alone
# shellcheck disable=SC2086
$cc -std=gnu11 -Wall -Wextra -Werror $san $cflags -o "$tmp/install_test" \
	"$src/tests/packaging/install_test.c" $libs -lm || fail "install_test.c does not build"
got=$(LD_LIBRARY_PATH=$libdir ldd "$tmp/install_test" | sed -n 's/.*libkvmm.so.0 => \([^ ]*\).*/\1/p')
[ "$got" = "$libdir/libkvmm.so.0" ] || fail "install_test loads libkvmm.so.0 from '$got'"
LD_LIBRARY_PATH=$libdir "$tmp/install_test" || fail "install_test failed"

# the daemon, the control tool, the unit, the man pages
[ -x "$root/usr/local/sbin/kvmmd" ] || fail "no /usr/local/sbin/kvmmd"
[ -x "$root/usr/local/bin/kvmmctl" ] || fail "no /usr/local/bin/kvmmctl"
grep -q '^ExecStart=/usr/local/sbin/kvmmd ' "$root/usr/local/lib/systemd/system/kvmmd.service" ||
	fail "kvmmd.service does not start /usr/local/sbin/kvmmd"
nman=$(find "$src"/Documentation -type f -name '*.[1358]' \( -path '*/man/*' -o -path '*/man[1358]/*' \) | wc -l)
got=$(find "$root/usr/local/share/man" -type f | wc -l)
[ "$got" -eq "$nman" ] || fail "$got man pages installed of $nman"
[ -f "$root/usr/local/share/man/man8/kvmmd.8" ] || fail "kvmmd.8 is not in man8"

# shellcheck disable=SC2086
$make_cmd uninstall DESTDIR="$root" >"$tmp/uninstall.log" 2>&1 || {
	cat "$tmp/uninstall.log" >&2
	fail "make uninstall failed"
}
left=$(find "$root" -type f -o -type l)
[ -z "$left" ] || fail "make uninstall left: $left"
echo "check-install: installed, built against with pkg-config alone ($nh headers, $nman man pages), ran, uninstalled"
