// Package load holds the load benchmarks of the local stack (`make
// bench-load`): research jobs N at a time against the fixture web, and
// warm session runs 200 at a time, with the server, its provider plugin and
// its sandboxes on this machine. They report throughput, latency
// percentiles, peak memory, DynamoDB calls per job and anything left behind
// (which must be nothing). Benchmarks only: they take minutes, and CI does
// not run them.
package load
