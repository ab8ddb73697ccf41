# kvmm - the KV-cache memory manager.  Top-level makefile (Kbuild style, our own).
#
#   make                 build everything (runs defconfig first on a fresh tree)
#   make check           build and run every test (SAN=1: under ASan+UBSan; SAN=thread:
#                        the threaded ones under ThreadSanitizer)
#   make demo            the end-to-end demonstration
#   make V=1             print whole commands
#   make O=DIR           build out of tree, in DIR
#   make install         install libkvmm, its headers and kvmm.pc, kvmmd, kvmmctl, man pages and
#                        the systemd unit (PREFIX=/usr/local, DESTDIR, LIBDIR, ...; see below)
#   make help            all targets
#
# See Documentation/dev-tools/build.md for how the Kbuild files work.

VERSION := 0.1.0

MAKEFLAGS += -rR --no-print-directory
.SUFFIXES:

ifeq ("$(origin V)", "command line")
  KBUILD_VERBOSE := $(V)
endif
KBUILD_VERBOSE ?= 0
export KBUILD_VERBOSE

# ---- out-of-tree builds: re-run this makefile inside O= -------------------------------
ifeq ($(KBUILD_SRC),)
ifneq ($(O),)
KBUILD_OUTPUT := $(shell mkdir -p "$(O)" && cd "$(O)" && pwd)
$(if $(KBUILD_OUTPUT),,$(error kvmm: cannot create output directory "$(O)"))
ifneq ($(KBUILD_OUTPUT),$(CURDIR))
skip-makefile := 1
PHONY := __sub-make
__sub-make:
	@$(MAKE) -C "$(KBUILD_OUTPUT)" -f "$(CURDIR)/Makefile" KBUILD_SRC="$(CURDIR)" O= \
		$(MAKECMDGOALS)
$(filter-out __sub-make,$(MAKECMDGOALS)): __sub-make
	@:
.PHONY: $(PHONY) $(MAKECMDGOALS)
endif
endif
endif

ifneq ($(skip-makefile),1)

ifeq ($(KBUILD_SRC),)
srctree := $(CURDIR)
else
srctree := $(KBUILD_SRC)
VPATH := $(srctree)
ifneq ($(wildcard $(srctree)/.config $(srctree)/include/generated),)
$(error kvmm: the source tree is not clean; run 'make mrproper' in $(srctree) first)
endif
endif
objtree := $(CURDIR)
export srctree objtree

include $(srctree)/scripts/Kbuild.include

.DEFAULT_GOAL := all
PHONY := all

# Targets that need no configuration.
no-config-targets := clean mrproper distclean help deps format format-check defconfig
config-needed := 1
ifneq ($(MAKECMDGOALS),)
ifeq ($(filter-out $(no-config-targets),$(MAKECMDGOALS)),)
config-needed :=
endif
endif

# ---- configuration ----------------------------------------------------------------------
ifeq ($(config-needed),1)
# A missing .config is made from the defaults, then make restarts with it.
.config:
	$(Q)$(srctree)/scripts/kconfig.sh defconfig $(srctree)

include/generated/autoconf.mk: .config $(srctree)/scripts/kconfig.sh
	$(Q)$(srctree)/scripts/kconfig.sh autoconf $(srctree)
include/generated/autoconf.h: include/generated/autoconf.mk
	@:

include .config
include include/generated/autoconf.mk
endif

# ---- tools and flags --------------------------------------------------------------------
# -rR drops make's built-in CC in sub-makes: treat "default" and "undefined" alike.
ifneq ($(filter default undefined,$(origin CC)),)
CC := gcc
endif
# C++ only for the host build of the CUDA kernels (tests/fakecuda/simt_kernels.cc): the
# compiler of the same family as CC
ifneq ($(filter default undefined,$(origin CXX)),)
CXX := $(if $(findstring clang,$(CC)),clang++,g++)
endif
ifneq ($(filter default undefined,$(origin AR)),)
AR := ar
endif

# SAN=1 on the command line, or CONFIG_KVMM_SANITIZE=y, builds with ASan+UBSan; SAN=thread with TSan.
ifeq ($(SAN),1)
KVMM_SANITIZE := y
endif
ifeq ($(SAN),0)
KVMM_SANITIZE := n
endif
# SAN=thread builds with ThreadSanitizer instead; `make check SAN=thread` runs the programs
# with threads of their own (scripts/run-tests.sh, tsan-tests), the daemon's included.
ifeq ($(SAN),thread)
KVMM_SANITIZE := thread
endif

KBUILD_CPPFLAGS := -D_GNU_SOURCE -I$(srctree)/include -I$(objtree)/include -I$(srctree) \
		   -DKVMM_VERSION='"$(VERSION)"'
KBUILD_CFLAGS := -std=gnu11 -O2 -g -pipe -pthread -fPIC -fno-strict-aliasing \
		 -Wall -Wextra -Werror -Wformat=2 -Wvla -Wno-missing-field-initializers
# C++ without its runtime (no exceptions, RTTI or guarded statics): objects link with $(CC)
KBUILD_CXXFLAGS := -std=gnu++17 -O2 -g -pipe -pthread -fPIC -fno-strict-aliasing \
		   -fno-exceptions -fno-rtti -fno-threadsafe-statics \
		   -Wall -Wextra -Werror -Wno-missing-field-initializers
KBUILD_LDFLAGS := -pthread -Wl,-z,noexecstack -Wl,-z,relro -Wl,-z,now
ifeq ($(KVMM_SANITIZE),y)
SANFLAGS := -fsanitize=address,undefined -fno-sanitize-recover=undefined \
	    -fno-omit-frame-pointer
KBUILD_CFLAGS += $(SANFLAGS)
KBUILD_CXXFLAGS += $(SANFLAGS)
KBUILD_LDFLAGS += $(SANFLAGS)
KBUILD_CPPFLAGS += -DKVMM_SANITIZE=1
endif
ifeq ($(KVMM_SANITIZE),thread)
SANFLAGS := -fsanitize=thread -fno-omit-frame-pointer
# gcc warns that TSan does not model fences (the seqlocks' readers): scripts/tsan.supp
ifeq ($(findstring clang,$(CC)),)
KBUILD_CFLAGS += -Wno-tsan
KBUILD_CXXFLAGS += -Wno-tsan
endif
KBUILD_CFLAGS += $(SANFLAGS)
KBUILD_CXXFLAGS += $(SANFLAGS)
KBUILD_LDFLAGS += $(SANFLAGS)
# libc malloc (kmalloc.h): TSan sees its hand-offs between threads, not jemalloc's
KBUILD_CPPFLAGS += -DKVMM_SANITIZE=1 -DKVMM_SANITIZE_THREAD=1
endif
KBUILD_CFLAGS += $(EXTRA_CFLAGS)
KBUILD_CXXFLAGS += $(EXTRA_CXXFLAGS)
KBUILD_LDFLAGS += $(EXTRA_LDFLAGS)

# Every object depends on this file, rewritten only when the compiler or its flags change
# (CC=clang after gcc, SAN=1 after a plain build): such a change rebuilds everything.
flags-stamp := include/generated/build-flags
ifeq ($(config-needed),1)
flags-now := $(CC) $(KBUILD_CPPFLAGS) $(KBUILD_CFLAGS) $(KBUILD_LDFLAGS) $(CXX) $(KBUILD_CXXFLAGS)
flags-old := $(shell cat $(flags-stamp) 2>/dev/null)
ifneq ($(flags-now),$(flags-old))
$(shell mkdir -p include/generated && printf '%s\n' '$(call escsq,$(flags-now))' > $(flags-stamp))
endif
endif

# ---- the tree ---------------------------------------------------------------------------
kbuild-top := lib kvmm runtime kernels tools tests
# clean and mrproper must know every product, CUDA-only ones included, whatever .config says
ifeq ($(config-needed),)
KVMM_HAVE_CUDA := y
endif
include $(srctree)/scripts/Makefile.build

quiet_cmd_cc = CC      $@
      cmd_cc = mkdir -p $(@D) && $(CC) $(KBUILD_CPPFLAGS) $(KBUILD_CFLAGS) \
		$(ccflags-dir-$(patsubst %/,%,$(dir $@))) $(cflags-obj-$@) \
		-MMD -MP -MF $(call depfile,$@) -c -o $@ $<

quiet_cmd_cxx = CXX     $@
      cmd_cxx = mkdir -p $(@D) && $(CXX) $(KBUILD_CPPFLAGS) $(KBUILD_CXXFLAGS) \
		$(ccflags-dir-$(patsubst %/,%,$(dir $@))) $(cflags-obj-$@) \
		-MMD -MP -MF $(call depfile,$@) -c -o $@ $<

quiet_cmd_ar = AR      $@
      cmd_ar = mkdir -p $(@D) && rm -f $@ && $(AR) rcsD $@ $(filter %.o,$^)

quiet_cmd_link = LD      $@
      cmd_link = $(CC) $(KBUILD_LDFLAGS) -o $@ $(link-objs) \
		-Wl,--start-group $(link-libs) -Wl,--end-group $(link-ldlibs)

quiet_cmd_solink = LD      $@
      cmd_solink = $(CC) $(KBUILD_LDFLAGS) -shared -Wl,-soname,$(@F).0 -o $@ \
		$(filter %.o,$^) $(link-ldlibs) && ln -sf $(@F) $@.0

%.o: %.c $(flags-stamp) | include/generated/autoconf.h
	$(call cmd,cc)

%.o: %.cc $(flags-stamp) | include/generated/autoconf.h
	$(call cmd,cxx)

$(flags-stamp):
	@:

-include $(foreach o,$(all-objs),$(call depfile,$(o)))

all: $(all-progs) $(all-tests) $(all-libs) $(all-extra)

# ---- tests ------------------------------------------------------------------------------
PHONY += check __check
check:
	$(Q)$(srctree)/scripts/deps.sh --if-missing
	$(Q)$(MAKE) -f $(srctree)/Makefile __check

# What `make check SAN=thread` runs: the programs where threads share memory (the daemon's
# kswapd, swap writeback and remote worker beside its event loop; the libraries' own threads;
# the frame budget's reclaim taking other pools' locks beside their kvswapd).
tsan-tests := tests/unit/test_atomic tests/unit/test_kmalloc tests/unit/test_kswapd \
	tests/unit/test_trace \
	tests/unit/test_log tests/unit/test_ring tests/unit/test_ipc tests/unit/test_swap \
	tests/unit/test_remote tests/integration/itest_ring tests/integration/itest_async \
	tests/integration/itest_share tests/integration/itest_kill tests/integration/itest_swap \
	tests/integration/itest_remote tests/integration/itest_budget \
	tests/integration/itest_rthreads
check-tests := $(if $(filter thread,$(KVMM_SANITIZE)),$(filter $(tsan-tests),$(all-tests)),\
	$(all-tests) $(all-test-scripts))
# those programs and the daemon they start, not the whole tree (CI's time)
check-deps := $(if $(filter thread,$(KVMM_SANITIZE)),$(filter $(tsan-tests),$(all-tests)) \
	kvmm/kvmmd,all)

__check: $(check-deps)
	$(Q)KVMM_SRCTREE=$(srctree) KVMM_SANITIZE=$(KVMM_SANITIZE) KVMM_HAVE_CUDA=$(KVMM_HAVE_CUDA) \
		KVMM_MAKE='$(MAKE) -f $(srctree)/Makefile' KVMM_CC='$(CC)' \
		$(srctree)/scripts/run-tests.sh $(check-tests)

# ---- demo ------------------------------------------------------------------------------
PHONY += demo __demo
demo:
	$(Q)$(srctree)/scripts/deps.sh --if-missing
	$(Q)$(MAKE) -f $(srctree)/Makefile __demo

__demo: all
	$(Q)KVMM_SRCTREE=$(srctree) $(srctree)/scripts/demo.sh

# the page bookkeeping alone (C agents, no model): the demo before kvmm.llm
PHONY += demo-bookkeeping __demo-bookkeeping
demo-bookkeeping:
	$(Q)$(srctree)/scripts/deps.sh --if-missing
	$(Q)$(MAKE) -f $(srctree)/Makefile __demo-bookkeeping

__demo-bookkeeping: all
	$(Q)KVMM_SRCTREE=$(srctree) $(srctree)/scripts/demo-bookkeeping.sh

# ---- install ------------------------------------------------------------------------------
# Debian-like layout under PREFIX; every directory can be overridden on the command line.
# DESTDIR is prepended to every path written and appears in none of the files installed.
PREFIX ?= /usr/local
MULTIARCH ?= $(or $(shell $(CC) -print-multiarch 2>/dev/null),$(shell uname -m)-linux-gnu)
BINDIR ?= $(PREFIX)/bin
SBINDIR ?= $(PREFIX)/sbin
LIBDIR ?= $(PREFIX)/lib/$(MULTIARCH)
INCLUDEDIR ?= $(PREFIX)/include
PKGCONFIGDIR ?= $(LIBDIR)/pkgconfig
MANDIR ?= $(PREFIX)/share/man
UNITDIR ?= $(PREFIX)/lib/systemd/system
install-env = srctree=$(srctree) objtree=$(objtree) VERSION=$(VERSION) \
	KVMM_HAVE_CUDA=$(KVMM_HAVE_CUDA) DESTDIR=$(DESTDIR) PREFIX=$(PREFIX) BINDIR=$(BINDIR) \
	SBINDIR=$(SBINDIR) LIBDIR=$(LIBDIR) INCLUDEDIR=$(INCLUDEDIR) PKGCONFIGDIR=$(PKGCONFIGDIR) \
	MANDIR=$(MANDIR) UNITDIR=$(UNITDIR)

PHONY += install uninstall
install: all
	$(Q)$(install-env) $(srctree)/scripts/install.sh install

uninstall:
	$(Q)$(install-env) $(srctree)/scripts/install.sh uninstall

# ---- housekeeping ------------------------------------------------------------------------
PHONY += deps defconfig format format-check clean mrproper distclean help

deps:
	$(Q)$(srctree)/scripts/deps.sh

defconfig:
	$(Q)$(srctree)/scripts/kconfig.sh defconfig $(srctree)

format-check:
	$(Q)$(srctree)/scripts/format.sh --check $(srctree)

format:
	$(Q)$(srctree)/scripts/format.sh --fix $(srctree)

clean:
	$(Q)find . \( -name '*.o' -o -name '.*.o.d' -o -name '*.a' -o -name '*.so' -o -name '*.so.[0-9]*' \
		-o -name '*.fatbin' \) \( -type f -o -type l \) -delete
	$(Q)rm -f $(all-progs) $(all-tests) $(all-libs) $(all-extra)
	$(Q)rm -f $(flags-stamp)

mrproper distclean: clean
	$(Q)rm -rf .config include/generated

help:
	@echo 'kvmm $(VERSION) - build targets'
	@echo '  all (default)  build the daemon, the runtime, the tools and the tests'
	@echo '  check          build and run every test; SAN=1 runs them under ASan+UBSan,'
	@echo '                 SAN=thread the threaded ones (tsan-tests) under TSan'
	@echo '  demo           build and run the demonstration: LLM agents sharing one KV pool'
	@echo '  demo-bookkeeping  the page bookkeeping of sharing agents alone (no model)'
	@echo '  install        install under PREFIX (/usr/local; DESTDIR, LIBDIR, ... as well)'
	@echo '  uninstall      remove what install put there'
	@echo '  deps           install the Debian packages the build needs (as root)'
	@echo '  defconfig      write .config with the defaults (scripts/defconfig)'
	@echo '  format-check   clang-format dry run over the C sources'
	@echo '  format         reformat the C sources in place'
	@echo '  clean          remove build products, keep .config'
	@echo '  mrproper       remove build products and the configuration'
	@echo 'Variables: V=1 (whole commands)  O=DIR (out-of-tree)  CC=clang  SAN=1|thread'

.PHONY: $(PHONY)

endif # skip-makefile
