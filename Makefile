# sandstep: `make run` starts the local stack, `make test` runs everything CI runs.
SHELL := /bin/bash
.DEFAULT_GOAL := build

GO        ?= go
BIN       := bin
PLUGINDIR := $(BIN)/plugins
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS   := -s -w -X github.com/sandstep/sandstep/internal/service/version.Version=$(VERSION)
# Plugins run inside sandboxes too (the local provider's agent), so they are static.
PLUGINS   := $(notdir $(wildcard providers/*/cmd/sandstep-provider-*))
# Race detector where affordable: the whole tree on 2 cores stays well under CI's budget.
TESTFLAGS ?= -race -timeout 20m
# Packages tested at once. The tests mostly wait (sandboxes, DynamoDB Local,
# servers they kill and restart): on 2 cores, go's default of one package per
# core kept the CPU 40 % busy, and 4 at once took the suite from about 13 to
# 8.5 minutes.
TESTP     ?= 4

include lambda.mk

.PHONY: build cli plugins sandbox-tools deps proto test vet asl unit bench bench-load fuzz soak run clean

build: cli plugins sandbox-tools

cli:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/sandstep ./cmd/sandstep

plugins:
	@mkdir -p $(PLUGINDIR)
	@for p in $(PLUGINS); do \
	  d=$$(dirname $$(ls -d providers/*/cmd/$$p)); \
	  echo "build $(PLUGINDIR)/$$p"; \
	  CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(PLUGINDIR)/$$p ./$$d/$$p || exit 1; \
	done
	@# The local provider's agent inside sandboxes, which the plugin takes from its folder.
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(PLUGINDIR)/sandstep-local-agent ./providers/local/cmd/sandstep-local-agent

# Programs that run inside sandboxes: static, mounted by the local provider
# from bin/sandbox (tools_dir) and uploaded to providers without a mount.
# Deno (pinned in package-lock.json, installed by make deps) joins them: the
# session runners run TypeScript and JavaScript on it. A hard link costs no
# copy; another file system gets a copy.
DENO := node_modules/deno/deno
sandbox-tools:
	@mkdir -p $(BIN)/sandbox
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/sandbox/sandstep-crawler ./cmd/sandstep-crawler
	@mkdir -p $(BIN)/sandbox/python && cp -f clients/python/sandstep.py $(BIN)/sandbox/python/sandstep.py
	@if [ -x $(DENO) ]; then \
	  ln -f $(DENO) $(BIN)/sandbox/deno 2>/dev/null || cp -f $(DENO) $(BIN)/sandbox/deno; \
	else \
	  echo "sandbox-tools: no $(DENO) (make deps installs it): sessions cannot run typescript" >&2; \
	  if [ "$$CI" = true ]; then exit 1; fi; \
	fi

deps:
	@bash scripts/deps.sh

proto:
	@bash scripts/deps.sh protobuf-compiler libprotobuf-dev
	@bash scripts/gen-proto.sh

vet:
	$(GO) vet ./...
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo "gofmt: files above need formatting"; exit 1; }

# The plugin host's tests run twice: as usual, and as the Lambdas build it
# (lambda.mk), without go-plugin's Serve, so without go-plugin. The second
# runs beside the first, its output held until both have ended.
unit:
	@mkdir -p $(BIN); \
	$(GO) test $(TESTFLAGS) -tags sandstep.noserve ./providers/plugin/ > $(BIN)/unit-noserve.txt 2>&1 & noserve=$$!; \
	echo "$(GO) test $(TESTFLAGS) -p $(TESTP) ./..."; \
	$(GO) test $(TESTFLAGS) -p $(TESTP) ./...; all=$$?; \
	wait $$noserve; ns=$$?; \
	echo "$(GO) test $(TESTFLAGS) -tags sandstep.noserve ./providers/plugin/"; cat $(BIN)/unit-noserve.txt; \
	test $$all -eq 0 && test $$ns -eq 0

# Every state machine definition must also pass AWS's rules as asl-validator reads them.
asl:
	@for f in statemachine/*.asl.json; do node_modules/.bin/asl-validator --json-path $$f || exit 1; done

test: deps vet asl build unit

# Every fuzz target (func Fuzz* in a _test.go file) for FUZZTIME each; a
# crasher is written to the target's testdata/fuzz/ folder, where plain
# `go test` (and so CI) runs it from then on. FUZZ=FuzzName (a regexp) picks targets.
FUZZTIME ?= 30s
FUZZ     ?= Fuzz.*
fuzz: deps
	@set -e; for f in $$(grep -rl --include='*_test.go' --exclude-dir=node_modules '^func Fuzz' .); do \
	  for t in $$(sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*/\1/p' $$f | grep -Ex '$(FUZZ)'); do \
	    echo "fuzz $$(dirname $$f) $$t for $(FUZZTIME)"; \
	    $(GO) test -run '^$$' -fuzz "^$$t$$" -fuzztime $(FUZZTIME) $$(dirname $$f) || exit 1; \
	  done; \
	done

bench: deps build
	$(GO) test -run '^$$' -bench . -benchmem -count 1 $$($(GO) list ./... | grep -v /internal/testkit/load) | tee $(BIN)/bench.txt

# The load benchmarks (internal/testkit/load): research jobs 1, 5, 10 and 25
# at once against the fixture web, and 200 warm session runs at once, on the
# local stack. Minutes long; not part of make bench or CI.
bench-load: deps build
	$(GO) test -run '^$$' -bench . -benchtime 1x -count 1 -timeout 60m ./internal/testkit/load | tee $(BIN)/bench-load.txt

# The fault soak: N research jobs against a real `sandstep serve` with faults
# injected at random (phase failures, plugin and server kill -9, provider 5xx
# and 429, cancels), then every invariant checked. SEED replays a run (the
# seed is printed first). Bounded: 6 s a job plus 10 minutes. CI runs a
# small N inside `make test`.
N    ?= 100
SEED ?=
soak: deps build
	SOAK_N=$(N) SOAK_SEED=$(SEED) SOAK_REPORT=$(BIN)/soak.json \
	  $(GO) test -count=1 -run '^TestSoak$$' -timeout $$(( $(N) * 6 + 600 ))s -v ./internal/testkit/soak

# ADDR=host:port listens there instead of [server] addr (client commands
# then need SANDSTEP_URL=http://host:port or --server).
ADDR ?=
run: deps build
	$(BIN)/sandstep serve $(if $(ADDR),--addr $(ADDR))

clean:
	rm -rf $(BIN)
