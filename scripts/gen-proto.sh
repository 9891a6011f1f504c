#!/usr/bin/env bash
# Regenerates the Go code of the provider plugin protocol from
# providers/proto/provider.proto. The generated files are committed, so only
# someone changing the .proto needs this.
#
# The code generators are pinned: protoc-gen-go must match the
# google.golang.org/protobuf version in go.mod (its output embeds that
# runtime's expectations) and protoc-gen-go-grpc must emit code the grpc
# version in go.mod supports. They are installed into ./bin/tools, so nothing
# outside the repository changes; a second run reuses them.
set -euo pipefail
cd "$(dirname "$0")/.."

PROTOC_GEN_GO_VERSION=v1.36.12
PROTOC_GEN_GO_GRPC_VERSION=v1.6.2

# protoc, and the well-known types (google/protobuf/*.proto) that Debian
# ships in libprotobuf-dev, a recommendation protoc does not pull in alone.
if ! command -v protoc >/dev/null 2>&1 || [ ! -f /usr/include/google/protobuf/timestamp.proto ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "gen-proto: protoc or its well-known types are missing; install them with: sudo apt-get install -y protobuf-compiler libprotobuf-dev" >&2
    exit 1
  fi
  echo "gen-proto: installing protobuf-compiler libprotobuf-dev"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends protobuf-compiler libprotobuf-dev >/dev/null
fi

tools="$PWD/bin/tools"
mkdir -p "$tools"

# install_tool BINARY PACKAGE VERSION installs PACKAGE@VERSION unless the
# binary already in bin/tools was built from exactly that module version.
install_tool() {
  local bin=$1 pkg=$2 version=$3
  if [ -x "$tools/$bin" ] &&
    go version -m "$tools/$bin" 2>/dev/null | awk '$1 == "mod" { print $3 }' | grep -qx "$version"; then
    return
  fi
  echo "gen-proto: installing $pkg@$version"
  GOBIN="$tools" GOFLAGS=-mod=mod go install "$pkg@$version"
}

install_tool protoc-gen-go google.golang.org/protobuf/cmd/protoc-gen-go "$PROTOC_GEN_GO_VERSION"
install_tool protoc-gen-go-grpc google.golang.org/grpc/cmd/protoc-gen-go-grpc "$PROTOC_GEN_GO_GRPC_VERSION"

PATH="$tools:$PATH" protoc \
  --proto_path=providers/proto \
  --go_out=providers/proto --go_opt=paths=source_relative \
  --go-grpc_out=providers/proto --go-grpc_opt=paths=source_relative \
  providers/proto/provider.proto

echo "gen-proto: generated providers/proto/provider.pb.go and provider_grpc.pb.go"
