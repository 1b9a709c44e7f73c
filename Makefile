# llmgw's build. `make test` is what CI runs (.ci/run).

# Go 1.26.8 ships standard-library vulnerabilities reachable from an HTTP
# server (net/http, crypto/tls, crypto/x509). The module proxy serves the
# fixed toolchain, and the go command fetches it when told to; a toolchain
# line in go.mod is not enough, since machines here default to GOTOOLCHAIN=local.
export GOTOOLCHAIN := go1.27.3

GO      ?= go
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X main.version=$(VERSION)
BIN     := bin/llmgw
HOOK    := bin/llmgw-hook

# The SPANK plugin (--llmgw-model), built against libslurm-dev's headers.
# `make build` builds it too when the headers are there, so a machine
# without Slurm's development package still builds llmgw.
# Slurm loads a plugin only if it was built for its own major.minor, so a
# site that builds its own Slurm builds the plugin against that:
# `make spank SLURM=PREFIX` takes PREFIX/include; without SLURM, the
# includedir of pkg-config's slurm (slurm-devel RPMs ship slurm.pc), else
# /usr/include (Debian's libslurm-dev). SLURM_INC names the directory outright.
SPANK       := bin/llmgw_spank.so
SPANK_SRC   := slurm/spank/llmgw_spank.c
SPANK_LDS   := slurm/spank/llmgw_spank.lds
ifneq ($(SLURM),)
SLURM_INC   := $(SLURM)/include
endif
SLURM_INC   ?= $(or $(shell pkg-config --variable=includedir slurm 2>/dev/null),/usr/include)
SPANK_CPPFLAGS := -D_GNU_SOURCE -D_FORTIFY_SOURCE=2 -I$(SLURM_INC)
SPANK_CFLAGS   := -std=gnu11 -O2 -g -Wall -Wextra -Werror -fstack-protector-strong -fstack-clash-protection -fPIC
SPANK_LDFLAGS  := -shared -Wl,-z,noexecstack -Wl,-z,relro -Wl,-z,now -Wl,--version-script=$(SPANK_LDS)
HAVE_SPANK_H   := $(wildcard $(SLURM_INC)/slurm/spank.h)

.PHONY: all build spank demo test lint unit integration package package-spank dist-spank clean help

all: build

# The hook binary starts on every job: static (should anything it links use
# cgo, every start would wait for the dynamic loader) and stripped; the same
# version as llmgw, whose resolved configuration copies it reads.
# scripts/bench/hook.sh measures it.
## build: the llmgw and llmgw-hook binaries in bin/ (and the SPANK plugin when slurm/spank.h is installed)
build: $(if $(HAVE_SPANK_H),spank) munge-h
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/llmgw
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '-s -w $(LDFLAGS)' -o $(HOOK) ./cmd/llmgw-hook

# llmgw links libmunge (api/munge): a decode through it costs a
# fortieth of starting unmunge. Its header comes with libmunge-dev; the
# tests also run real munged daemons (munge). As root, a fresh machine gets
# them here, so that `make demo` and `make test` need no step by hand.
.PHONY: munge-h
munge-h:
	@test -e /usr/include/munge.h -a -x /usr/sbin/munged || LLMGW_INSTALL_WHO=make scripts/install-packages libmunge-dev munge

## spank: the SPANK plugin bin/llmgw_spank.so (needs libslurm-dev; SLURM=PREFIX for a Slurm built elsewhere)
# .FORCE: a plugin built for another Slurm's headers (another SLURM=) is
# never taken as up to date.
spank: $(SPANK)

$(SPANK): $(SPANK_SRC) $(SPANK_LDS) .FORCE
	@test -e $(SLURM_INC)/slurm/spank.h || { echo "$(SLURM_INC)/slurm/spank.h is missing: install libslurm-dev (apt-get install libslurm-dev), or give your Slurm's install prefix: make spank SLURM=PREFIX"; exit 1; }
	@mkdir -p $(dir $@)
	$(CC) $(SPANK_CPPFLAGS) $(SPANK_CFLAGS) $(SPANK_LDFLAGS) -o $@.tmp $(SPANK_SRC)
	mv $@.tmp $@
	@v=$$(sed -n 's/^#define SLURM_VERSION_NUMBER //p' $(SLURM_INC)/slurm/slurm_version.h); \
	echo "$@: built for Slurm $$(($$v >> 16 & 255)).$$(printf %02d $$(($$v >> 8 & 255))) ($(SLURM_INC)); Slurm loads it only on that major.minor"

.PHONY: .FORCE
.FORCE:

## demo: the whole flow on this machine (coordinator, agents, a fetch, status); cleans up after itself
demo: build
	$(BIN) demo

## test: lint, unit tests with -race, then the integration tests on a real private Slurm cluster
test: munge-h lint unit integration

## lint: gofmt and go vet
lint:
	@unformatted=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$unformatted" ]; then echo "gofmt would change: $$unformatted"; exit 1; fi
	$(GO) vet ./...

## unit: unit tests with the race detector
unit: munge-h
	$(GO) test -race -count=1 ./...

## integration: real Slurm (scripts/dev-cluster), real mounts, real processes, the installed package; needs root
integration: build
	scripts/test-integration
	scripts/test-package

## package: the .deb and .rpm in dist/, from packaging/nfpm.yaml (see the PKG_* inputs)
#
# What goes into the package besides bin/llmgw. Each is built elsewhere in
# this Makefile; point a variable at another file to package that instead.
# A missing input stops the build with its name: a package without its hooks
# would install cleanly and fail on the first job. The SPANK plugin is not
# an input: it ships per Slurm release (make package-spank).
PKG_HOOK       ?= bin/llmgw-hook
PKG_JOB_SUBMIT ?= slurm/lua/job_submit.lua
# A tag v1.2.3 gives 1.2.3; otherwise 0.0.0+git.<commit>. '-' becomes '.',
# since RPM versions cannot hold one.
PKG_VERSION ?= $(shell v=$$(git describe --tags --match 'v[0-9]*' --dirty 2>/dev/null) && echo "$$v" | sed 's/^v//; s/-/./g' || \
	echo "0.0.0+git.$$(git rev-parse --short HEAD 2>/dev/null || echo unknown)$$(git diff --quiet HEAD 2>/dev/null || echo .dirty)")
PKG_ARCH    ?= $(shell $(GO) env GOARCH)
DIST        := dist

# nfpm is built from the module proxy at a fixed version, outside go.mod: as a
# tool directive it would add some seventy modules to the project's
# requirements, which no llmgw code uses. `go install pkg@version` resolves
# exactly nfpm's own tested go.mod and checks it against sum.golang.org.
NFPM_VERSION := v2.48.0
NFPM         := bin/nfpm-$(NFPM_VERSION)

$(NFPM):
	GOBIN=$(CURDIR)/bin.nfpm.tmp $(GO) install github.com/goreleaser/nfpm/v2/cmd/nfpm@$(NFPM_VERSION)
	mkdir -p bin && mv bin.nfpm.tmp/nfpm $@ && rmdir bin.nfpm.tmp

package: build $(NFPM)
	@missing=0; \
	check() { [ -f "$$1" ] || { echo "make package: $$2 is missing: $$1; $$3" >&2; missing=1; }; }; \
	check '$(PKG_HOOK)' 'the hook binary (PKG_HOOK)' 'build it from cmd/llmgw-hook, or set PKG_HOOK=FILE'; \
	check '$(PKG_JOB_SUBMIT)' 'job_submit.lua (PKG_JOB_SUBMIT)' 'it lives in slurm/lua, or set PKG_JOB_SUBMIT=FILE'; \
	if [ $$missing -ne 0 ]; then echo "make package: nothing packaged" >&2; exit 1; fi
	rm -rf $(DIST) && mkdir -p $(DIST)
	for p in deb rpm; do \
		LLMGW_PKG_VERSION='$(PKG_VERSION)' LLMGW_PKG_ARCH='$(PKG_ARCH)' LLMGW_PKG_BIN='$(BIN)' \
		LLMGW_PKG_HOOK='$(PKG_HOOK)' LLMGW_PKG_JOB_SUBMIT='$(PKG_JOB_SUBMIT)' \
		$(NFPM) package --config packaging/nfpm.yaml --packager $$p --target $(DIST)/ || exit 1; \
	done

## package-spank: one llmgw-spank-slurmX.Y .deb per Debian release in dist/spank/ (RELEASES=..., default bookworm trixie sid; needs root)
# Each plugin is built inside its release's root against that release's
# headers and tied to its Slurm by a versioned dependency: see
# scripts/package-spank and packaging/spank/nfpm.yaml.
RELEASES ?= bookworm trixie sid
package-spank: $(NFPM)
	NFPM=$(NFPM) PKG_VERSION='$(PKG_VERSION)' PKG_ARCH='$(PKG_ARCH)' scripts/package-spank $(RELEASES)

## dist-spank: dist/llmgw-spank-VERSION.tar.gz, the plugin's source for sites that build their own Slurm
# The tarball builds with its own Makefile (SLURM=PREFIX, or pkg-config's
# slurm) and holds an RPM spec that builds it against slurm-devel.
SPANK_DIST := llmgw-spank-$(subst +,.,$(subst -,.,$(PKG_VERSION)))
dist-spank:
	rm -rf $(DIST)/$(SPANK_DIST) && mkdir -p $(DIST)/$(SPANK_DIST)
	cp $(SPANK_SRC) $(SPANK_LDS) $(DIST)/$(SPANK_DIST)/
	cp slurm/spank/dist/Makefile slurm/spank/dist/README $(DIST)/$(SPANK_DIST)/
	sed 's/@VERSION@/$(subst +,.,$(subst -,.,$(PKG_VERSION)))/' slurm/spank/dist/llmgw-spank.spec.in >$(DIST)/$(SPANK_DIST)/llmgw-spank.spec
	tar -C $(DIST) -czf $(DIST)/$(SPANK_DIST).tar.gz --owner=0 --group=0 --sort=name $(SPANK_DIST)
	rm -rf $(DIST)/$(SPANK_DIST)
	@echo "$(DIST)/$(SPANK_DIST).tar.gz"

## clean: remove build output
clean:
	rm -rf bin $(DIST)

## help: this list
help:
	@sed -n 's/^## //p' $(MAKEFILE_LIST)
