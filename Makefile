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

# The SPANK plugin (--llmgw-model), built against libslurm-dev's headers.
# `make build` builds it too when the headers are there, so a machine
# without Slurm's development package still builds llmgw.
SPANK       := bin/llmgw_spank.so
SPANK_SRC   := slurm/spank/llmgw_spank.c
SPANK_LDS   := slurm/spank/llmgw_spank.lds
SLURM_INC   ?= /usr/include
SPANK_CPPFLAGS := -D_GNU_SOURCE -D_FORTIFY_SOURCE=2 -I$(SLURM_INC)
SPANK_CFLAGS   := -std=gnu11 -O2 -g -Wall -Wextra -Werror -fstack-protector-strong -fstack-clash-protection -fPIC
SPANK_LDFLAGS  := -shared -Wl,-z,noexecstack -Wl,-z,relro -Wl,-z,now -Wl,--version-script=$(SPANK_LDS)
HAVE_SPANK_H   := $(wildcard $(SLURM_INC)/slurm/spank.h)

.PHONY: all build spank demo test lint unit integration clean help

all: build

## build: the llmgw binary in bin/ (and the SPANK plugin when slurm/spank.h is installed)
build: $(if $(HAVE_SPANK_H),spank)
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/llmgw

## spank: the SPANK plugin bin/llmgw_spank.so (needs libslurm-dev)
spank: $(SPANK)

$(SPANK): $(SPANK_SRC) $(SPANK_LDS)
	@test -e $(SLURM_INC)/slurm/spank.h || { echo "$(SLURM_INC)/slurm/spank.h is missing: install libslurm-dev (apt-get install libslurm-dev), or set SLURM_INC"; exit 1; }
	@mkdir -p $(dir $@)
	$(CC) $(SPANK_CPPFLAGS) $(SPANK_CFLAGS) $(SPANK_LDFLAGS) -o $@.tmp $(SPANK_SRC)
	mv $@.tmp $@

## demo: the whole flow on this machine (coordinator, agents, a fetch, status); cleans up after itself
demo: build
	$(BIN) demo

## test: lint, unit tests with -race, then the integration tests on a real private Slurm cluster
test: lint unit integration

## lint: gofmt and go vet
lint:
	@unformatted=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$unformatted" ]; then echo "gofmt would change: $$unformatted"; exit 1; fi
	$(GO) vet ./...

## unit: unit tests with the race detector
unit:
	$(GO) test -race -count=1 ./...

## integration: real Slurm (scripts/dev-cluster), real mounts, real processes; needs root
integration: build
	scripts/test-integration

## clean: remove build output
clean:
	rm -rf bin

## help: this list
help:
	@sed -n 's/^## //p' $(MAKEFILE_LIST)
