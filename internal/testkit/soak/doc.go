// Package soak holds the tests that break a real server: `sandstep serve`
// runs as a child process on a data dir of its own (DynamoDB Local, the
// provider plugin, the fixture web and fake search and model on
// 127.0.0.1), and the tests kill it with SIGKILL in the middle of each
// phase of a job and of a session run, restart it on the same data, and
// check that everything finished and nothing leaked: no job left running,
// no sandbox alive, no ledger entry open, no plugin process orphaned, no
// event lost or written twice. TestSoak does the same at random over many
// jobs, with every kind of fault (`make soak N=...`).
//
// The server is built with the sandstep_faults tag, which lets the tests
// hold or fail any phase invocation from outside (internal/localstack's
// faults.go); nothing else differs from the released binary.
package soak
