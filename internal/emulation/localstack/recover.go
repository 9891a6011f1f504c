package localstack

import (
	"context"
	"time"

	"github.com/sandstep/sandstep/internal/emulation/asl"
	"github.com/sandstep/sandstep/internal/emulation/localexec"
)

// faultHook, when a build sets it (the sandstep_faults tag, for the tests
// that break a real server), wraps the invoker between the engine and the
// phases, as Options.WrapInvoker does in process.
var faultHook func(asl.Invoker) asl.Invoker

// recover picks up what a previous process on the same data left: its
// executions resume (or fail with their cleanup), then one reaper pass in
// startup mode ends what nothing claims any more, at once rather than
// after an idle timeout: runs in flight, sandboxes of sessions not in use
// or of jobs that did not resume, sandboxes the ledger does not know.
// Problems are logged: the server starts anyway, and the next start or the
// regular passes try again.
func (s *Stack) recover(ctx context.Context, since time.Time) {
	for _, engine := range []*localexec.Local{s.Engine, s.AgentEngine} {
		n, err := engine.Recover(ctx)
		if err != nil {
			s.log.Error("recovering executions", "err", err, "counts", n)
		} else if n.Resumed+n.Failed+n.Cleaned > 0 {
			s.log.Info("recovered executions", "counts", n)
		}
	}
	// Startup logs its counts and errors.
	_, _ = s.Reaper.Startup(ctx, since)
}
