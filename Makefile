# llmgw's build. `make test` is what CI runs (.ci/run); `make demo` shows
# the whole flow on this machine.

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

.PHONY: all build test lint unit integration clean help

all: build

# The hook binary starts on every job: static (should anything it links use
# cgo, every start would wait for the dynamic loader) and stripped; the same
# version as llmgw, whose resolved configuration copies it reads.
# scripts/bench/hook.sh measures it.
## build: the llmgw and llmgw-hook binaries in bin/
build:
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/llmgw
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '-s -w $(LDFLAGS)' -o $(HOOK) ./cmd/llmgw-hook

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
