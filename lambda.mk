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

# $(call lambda-function,<folder under functions/>). lambda.norpc drops aws-lambda-go's
# RPC mode, which provided runtimes never use; grpcnotrace drops grpc's x/net/trace
# debug pages (about 3 MB) that nothing serves in a Lambda; nethttpomithttp2 drops
# net/http's bundled HTTP/2 (about 0.4 MB): a Lambda's HTTP calls (AWS APIs, search,
# models) speak HTTP/1.1 over TLS, and the provider plugins' gRPC has its own HTTP/2.
#
# -gcflags=all=-l turns inlining off: the bootstraps are about 1.2 MB (9 %) smaller,
# which keeps every function under the 12 MB budget with go-plugin's host (gRPC,
# net/rpc, TLS) linked in. A Lambda spends its time waiting on DynamoDB, the
# provider and the network, not on the few hundred microseconds of Go that inlining
# would shave (BENCHMARKS.md has the measurements).
LAMBDA_TAGS     = lambda.norpc,grpcnotrace,nethttpomithttp2
LAMBDA_GCFLAGS  = all=-l
define lambda-function
	@mkdir -p '$(lambda-artifacts)'
	$(LAMBDA_GOBUILD) -gcflags=$(LAMBDA_GCFLAGS) -tags $(LAMBDA_TAGS) -o '$(lambda-artifacts)/bootstrap' ./functions/$(1)
	cp config.toml '$(lambda-artifacts)/config.toml'
endef

.PHONY: build-ApiFunction build-DiscoverFunction build-ProvisionFunction build-CrawlFunction \
	build-SummarizeFunction build-ReportFunction build-CleanupFunction build-ProvidersLayer

build-ApiFunction:
	$(call lambda-function,api)

build-DiscoverFunction:
	$(call lambda-function,discover)

build-ProvisionFunction:
	$(call lambda-function,provision)

build-CrawlFunction:
	$(call lambda-function,crawl)

build-SummarizeFunction:
	$(call lambda-function,summarize)

build-ReportFunction:
	$(call lambda-function,report)

build-CleanupFunction:
	$(call lambda-function,cleanup)

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
	$(call lambda-function,run)

build-ReaperFunction:
	$(call lambda-function,reaper)
