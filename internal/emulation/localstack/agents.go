package localstack

import (
	"context"
	"errors"
	"os"

	"github.com/sandstep/sandstep/config"
	"github.com/sandstep/sandstep/internal/emulation/asl"
	"github.com/sandstep/sandstep/internal/emulation/localexec"
	"github.com/sandstep/sandstep/internal/emulation/samtemplate"
	"github.com/sandstep/sandstep/internal/service/agents"
	"github.com/sandstep/sandstep/internal/service/store"
)

// startAgents runs the agent-run state machine of the template on a
// second local executor, with AgentFunction's handler in-process.
func (s *Stack) startAgents(opts Options, tmpl *samtemplate.Template, st *store.Store) error {
	def, subs, err := stateMachine(tmpl, AgentStateMachineID)
	if err != nil {
		return err
	}
	s.Agents = agents.New(agents.Options{Store: st, Direct: s.Direct, Agents: opts.Config.Agents, Pricing: opts.Config.Pricing,
		Secret: config.EnvLookup(os.Getenv), Slice: opts.AgentSlice, Logger: s.log, Now: opts.Now})
	var inv asl.Invoker = localexec.NewInvoker(localexec.Functions{AgentFunction: s.Agents.Handle})
	if opts.WrapInvoker != nil {
		inv = opts.WrapInvoker(inv)
	}
	s.AgentEngine, err = localexec.NewLocal(localexec.LocalOptions{
		Definition: def, Substitutions: subs, Name: AgentStateMachineID, Invoker: inv,
		StatusChangeFunction: AgentFunction, CancelGrace: opts.CancelGrace, Store: st,
		Siblings: []string{StateMachineID}, Clock: opts.Clock, Logger: s.log,
	})
	return err
}

// executions are both engines' executions, as the reaper sees them.
type executions struct{ s *Stack }

func (e executions) Running(ctx context.Context) ([]string, error) {
	a, err := e.s.Engine.Running(ctx)
	if err != nil {
		return nil, err
	}
	b, err := e.s.AgentEngine.Running(ctx)
	return append(a, b...), err
}

// Stop goes to the engine of the job's type.
func (e executions) Stop(ctx context.Context, jobID, cause string) error {
	job, err := e.s.App.Store.GetJob(ctx, jobID)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return err
	}
	if job.Type == store.JobTypeAgent {
		return e.s.AgentEngine.Stop(ctx, jobID, cause)
	}
	return e.s.Engine.Stop(ctx, jobID, cause)
}
