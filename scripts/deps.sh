#!/bin/sh
# scripts/deps.sh - install the Debian packages kvmm needs to build and test.
#
#   deps.sh               install what is missing (as root), say so when nothing is
#   deps.sh --if-missing  the same, silent when everything is there (make check/demo)
#   deps.sh --list        print the package list
#   deps.sh --download DIR
#                         fetch (apt-get download, no root) the .debs of what the build and
#                         the CUDA tests link against, headers and libraries, plus make, into
#                         DIR: for a machine that has a compiler and nvcc but none of these
#                         and no network (a lent GPU machine: tools/gpu-check --debs DIR
#                         unpacks them into a private prefix, never into /)
#
# Idempotent: only missing packages are installed.  Not root: prints the apt command.
set -eu

# Build and test dependencies.  Later issues add theirs here.  tmux and curl: the kvmmctl
# integration test (top under tmux, /metrics scraped with curl).
# fio: the swap benchmark's baseline; tmux: drives `kvmmctl top` in a test; curl and
# prometheus (for promtool): scrape and check kvmmd's /metrics in a test.
# libclang-rt-dev: clang's sanitizer and libFuzzer runtimes (tools/fuzz).
# python3-pytest, python3-numpy, python3-torch: the Python package's tests (runtime/python,
# run by tests/integration/itest_python with /usr/bin/python3).
# libhiredis-dev: the remote tier's Redis client (kvmmd links it); redis-server: the Redis
# Cluster that tests/integration/itest_remote and `kvmm-bench remote` start (and redis-cli);
# libssl-dev: the remote tier's TLS (kvmm/remote_tls.c, hiredis 0.14 has none); openssl: the
# CLI that makes itest_remote's test certificates.
PACKAGES="make gcc clang pkg-config clang-format liburing-dev libjemalloc-dev libcmocka-dev
libxxhash-dev fio tmux curl prometheus libclang-rt-dev python3-pytest python3-numpy
python3-torch libhiredis-dev redis-server libssl-dev openssl"

# what a GPU machine lacks to build and run tools/gpu-check (runtime and -dev halves)
CARRY="make liburing2 liburing-dev libjemalloc2 libjemalloc-dev libcmocka0 libcmocka-dev
libxxhash0 libxxhash-dev libhiredis0.14 libhiredis-dev libssl3 libssl-dev"

mode=${1:-}
case "$mode" in
--list)
	echo $PACKAGES
	exit 0
	;;
--download)
	dir=${2:-}
	if [ -z "$dir" ]; then
		echo "deps.sh: --download needs a directory" >&2
		exit 2
	fi
	mkdir -p "$dir"
	# shellcheck disable=SC2086 # the lists are words
	(cd "$dir" && apt-get download -q $CARRY) || {
		echo "deps.sh: apt-get download failed (no network, or run apt-get update)" >&2
		exit 1
	}
	echo "deps: $(ls "$dir"/*.deb | wc -l) packages in $dir"
	exit 0
	;;
'' | --if-missing) ;;
*)
	echo "deps.sh: unknown option '$mode' (use --if-missing, --list or --download DIR)" >&2
	exit 2
	;;
esac

missing=""
for p in $PACKAGES; do
	st=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
	case "$st" in
	*"install ok installed"*) ;;
	*) missing="$missing $p" ;;
	esac
done

if [ -z "$missing" ]; then
	[ "$mode" = --if-missing ] || echo "deps: all build dependencies are installed"
	exit 0
fi

echo "deps: missing packages:$missing"
if [ "$(id -u)" -ne 0 ]; then
	echo "deps: not root; install them with:" >&2
	echo "  sudo apt-get update && sudo apt-get install -y --no-install-recommends$missing" >&2
	exit 1
fi
export DEBIAN_FRONTEND=noninteractive
# Refresh the package lists only when they are missing or older than a day.
if [ -z "$(find /var/lib/apt/lists -maxdepth 1 -name '*Packages*' -mtime -1 2>/dev/null | head -n 1)" ]; then
	apt-get update -qq
fi
# shellcheck disable=SC2086
apt-get install -y -qq --no-install-recommends $missing
echo "deps: installed$missing"
