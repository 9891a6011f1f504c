// Package providerpb is the Go code generated from provider.proto, the wire
// contract between sandstep and its sandbox provider plugins. Read the .proto
// for the semantics of each RPC; regenerate with scripts/gen-proto.sh.
package providerpb
