# Lambda build targets for `sam build` (BuildMethod: makefile). sam runs
# `make --makefile Makefile build-<LogicalId>` from the repository root (or a copy of
# it) with ARTIFACTS_DIR set to the folder it zips; the root Makefile includes this
# file. By hand: make build-DiscoverFunction ARTIFACTS_DIR=/tmp/out
#
# Every function is one static linux/arm64 binary named bootstrap (provided.al2023)
# with config.toml beside it; the layer holds the provider plugins in plugins/, which
# Lambda mounts at /opt/plugins.

# Recursive (=) on purpose: git runs only when a build-* recipe does, not whenever
# the including Makefile is read. sam builds in a copy without .git: version "dev".
LAMBDA_GO      ?= go
LAMBDA_VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LAMBDA_LDFLAGS  = -s -w -X github.com/sandstep/sandstep/internal/service/version.Version=$(LAMBDA_VERSION)
LAMBDA_GOBUILD  = GOOS=linux GOARCH=arm64 CGO_ENABLED=0 $(LAMBDA_GO) build -trimpath -ldflags '$(LAMBDA_LDFLAGS)'

# Expanded only when a recipe runs, so including this file costs other targets nothing.
lambda-artifacts = $(if $(strip $(ARTIFACTS_DIR)),$(ARTIFACTS_DIR),$(error ARTIFACTS_DIR is not set: sam build sets it; by hand, pass ARTIFACTS_DIR=<folder>))

# $(call lambda-function,<folder under functions/>[,<more go build flags>]). lambda.norpc drops aws-lambda-go's
# RPC mode, which provided runtimes never use; grpcnotrace drops grpc's x/net/trace
# debug pages (about 3 MB) that nothing serves in a Lambda; nethttpomithttp2 drops
# net/http's bundled HTTP/2 (about 0.4 MB): a Lambda's HTTP calls (AWS APIs, search,
# models) speak HTTP/1.1 over TLS, and the provider plugins' gRPC has its own HTTP/2.
# sandstep.noserve leaves out the plugin side of providers/plugin (go-plugin's Serve):
# a Lambda only hosts plugins, and the host side speaks go-plugin's protocol without
# linking go-plugin, whose net/rpc, gob, html/template, yamux, gRPC reflection and
# debug/elf weigh about 1.3 MB (BENCHMARKS.md).
LAMBDA_TAGS = lambda.norpc,grpcnotrace,nethttpomithttp2,sandstep.noserve
define lambda-function
	@mkdir -p '$(lambda-artifacts)'
	$(LAMBDA_GOBUILD) $(2) -tags $(LAMBDA_TAGS) -o '$(lambda-artifacts)/bootstrap' ./functions/$(1)
	cp config.toml '$(lambda-artifacts)/config.toml'
endef

# The functions that host the provider plugin link gRPC and protobuf (about 1.8 MB)
# besides what every function links; to stay under the 12 MB budget with this wave's
# features they are built without inlining, which makes them about 1.2 MB (9 %) smaller. Their Go is glue
# between DynamoDB, the plugin and the network; CPU-bound Go runs about 1.5x slower
# without inlining (BENCHMARKS.md), so Discover and Report, which have room and do
# the text work (ranking, citation checks), keep it.
LAMBDA_NOINLINE = -gcflags=all=-l

.PHONY: build-ApiFunction build-DiscoverFunction build-ProvisionFunction build-CrawlFunction \
	build-SummarizeFunction build-ReportFunction build-CleanupFunction build-AgentFunction build-ProvidersLayer

build-ApiFunction:
	$(call lambda-function,api,$(LAMBDA_NOINLINE))

build-DiscoverFunction:
	$(call lambda-function,discover)

build-ProvisionFunction:
	$(call lambda-function,provision,$(LAMBDA_NOINLINE))

build-CrawlFunction:
	$(call lambda-function,crawl,$(LAMBDA_NOINLINE))

build-SummarizeFunction:
	$(call lambda-function,summarize,$(LAMBDA_NOINLINE))

build-ReportFunction:
	$(call lambda-function,report)

build-CleanupFunction:
	$(call lambda-function,cleanup,$(LAMBDA_NOINLINE))

build-AgentFunction:
	$(call lambda-function,agent,$(LAMBDA_NOINLINE))

LAMBDA_PLUGINS := $(wildcard providers/*/cmd/sandstep-provider-*)
# The crawler runs inside the provider's sandboxes, not in the Lambda: it is
# built for their architecture (hosted sandboxes are x86_64) and uploaded
# from /opt/sandbox by the phases (SANDSTEP_CRAWLER).
SANDBOX_GOARCH ?= amd64

build-ProvidersLayer:
	@test -n '$(LAMBDA_PLUGINS)' || { echo 'build-ProvidersLayer: no providers/*/cmd/sandstep-provider-* to build' >&2; exit 1; }
	@mkdir -p '$(lambda-artifacts)/plugins'
	@for d in $(LAMBDA_PLUGINS); do \
	  echo "build $(lambda-artifacts)/plugins/$$(basename $$d)"; \
	  $(LAMBDA_GOBUILD) -o '$(lambda-artifacts)/plugins/'$$(basename $$d) ./$$d || exit 1; \
	done
	@mkdir -p '$(lambda-artifacts)/sandbox'
	GOOS=linux GOARCH=$(SANDBOX_GOARCH) CGO_ENABLED=0 $(LAMBDA_GO) build -trimpath -ldflags '$(LAMBDA_LDFLAGS)' \
	  -o '$(lambda-artifacts)/sandbox/sandstep-crawler' ./cmd/sandstep-crawler

# Sessions: the RunFunction executes run_code runs the API launches; the ReaperFunction
# is the scheduled cleanup.
.PHONY: build-RunFunction build-ReaperFunction

build-RunFunction:
	$(call lambda-function,run,$(LAMBDA_NOINLINE))

build-ReaperFunction:
	$(call lambda-function,reaper,$(LAMBDA_NOINLINE))
