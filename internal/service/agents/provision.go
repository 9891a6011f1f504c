package agents

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"github.com/sandstep/sandstep/internal/service/artifacts"
	"strings"
	"time"

	"github.com/sandstep/sandstep/config"
	"github.com/sandstep/sandstep/internal/service/direct"
	"github.com/sandstep/sandstep/internal/service/store"
	"github.com/sandstep/sandstep/providers"
)

// Where the run keeps its own files in the sandbox, outside /workspace.
const (
	stateDir   = "/tmp/.sandstep/agent"
	promptFile = stateDir + "/prompt"
	execMarker = stateDir + "/exec"
)

// Variables the agent's command gets besides the sandbox's SANDSTEP_URL,
// SANDSTEP_TOKEN and SANDSTEP_SANDBOX_ID.
const (
	EnvPromptFile   = "SANDSTEP_PROMPT_FILE"
	EnvArtifactsDir = "SANDSTEP_ARTIFACTS_DIR"
)

// sandboxGrace is how much longer than the run's timeout the sandbox may
// live: the time to collect and clean up. The provider ends it then even
// if nothing else does.
const sandboxGrace = 10 * time.Minute

// setupLimit bounds the agent's setup: provision waits for it, and one
// phase must end within a Lambda's 15 minutes (the Task's TimeoutSeconds
// in agent-run.asl.json), with time left to start the agent.
const setupLimit = 10 * time.Minute

// timeout is the run's time limit.
func (c *call) timeout() time.Duration { return time.Duration(c.req.TimeoutSeconds) * time.Second }

// sandboxName makes the create idempotent: a retried provision finds the
// sandbox the first attempt created.
func sandboxName(jobKey string) string {
	sum := sha256.Sum256([]byte(jobKey))
	return "agent-run-" + hex.EncodeToString(sum[:12])
}

func (c *call) provision(ctx context.Context) (Output, error) {
	if err := c.cancelled(ctx); err != nil {
		return Output{}, err
	}
	ag, ok := c.r.o.Agents[c.req.Agent]
	if !ok {
		return Output{}, &AgentFailed{Message: fmt.Sprintf("agent %q is not configured", c.req.Agent)}
	}
	if _, err := c.r.o.Store.SetStatus(ctx, c.job.ID, []store.Status{store.StatusQueued}, store.StatusRunning); err != nil && !errors.Is(err, store.ErrConflict) {
		return Output{}, err
	}
	if err := c.putUsage(ctx, usageProvision, store.Usage{AgentRuns: 1}); err != nil {
		return Output{}, err
	}
	var secrets []providers.Secret
	if ag.KeyEnv != "" {
		ref, err := config.ParseSecretRef(ag.KeyEnv)
		if err != nil {
			return Output{}, &AgentFailed{Message: fmt.Sprintf("agents.%s.key_env: %v", c.req.Agent, err)}
		}
		// The lookup's error names the reference, never a value.
		key, err := c.r.o.Secret(ref)
		if err != nil {
			return Output{}, &AgentFailed{Message: fmt.Sprintf("the model key of agent %q: %v", c.req.Agent, err)}
		}
		secrets = []providers.Secret{{Name: ag.KeyVar, Value: key, Hosts: ag.KeyHosts}}
	}
	ttl := min(c.timeout()+sandboxGrace, c.r.o.Direct.Config().MaxTTL.D())
	sb, err := c.r.o.Direct.CreateSandbox(ctx, c.caller, direct.CreateRequest{
		TTL: ttl, Network: ag.Network, AllowHosts: ag.AllowHosts, Name: sandboxName(c.job.ID),
		Labels: map[string]string{"agent_run": c.job.ClientID, "agent": c.req.Agent},
		APIURL: c.apiURL(), Secrets: secrets,
		// The sandbox and its children count in the run's usage.
		Job: c.job.ID,
	})
	if err != nil {
		return Output{}, fmt.Errorf("create the agent's sandbox: %w", err)
	}
	id := sb.ID
	if _, err := c.r.o.Store.UpdateJob(ctx, c.job.ID, store.JobUpdate{SandboxID: &id}); err != nil {
		return Output{}, err
	}
	if err := c.event(ctx, "sandbox.created", "sandbox.created", map[string]any{"sandbox_id": id, "message": "sandbox " + id + " created"}); err != nil {
		return Output{}, err
	}
	if eid, ok := c.startedExec(ctx, id); ok {
		return Output{SandboxID: id, ExecID: eid}, nil
	}
	for _, p := range sortedFiles(c.req.Files) {
		if err := c.r.o.Direct.WriteFile(ctx, c.caller, id, "/workspace/"+p, 0o644, strings.NewReader(c.req.Files[p])); err != nil {
			return Output{}, fmt.Errorf("write %s: %w", p, err)
		}
	}
	if err := c.r.o.Direct.WriteFile(ctx, c.caller, id, promptFile, 0o600, strings.NewReader(c.req.Prompt)); err != nil {
		return Output{}, fmt.Errorf("write the prompt: %w", err)
	}
	env := map[string]string{EnvPromptFile: promptFile, EnvArtifactsDir: artifacts.Dir}
	for k, v := range ag.Env {
		env[k] = v
	}
	if ag.Setup != "" {
		limit := min(c.timeout(), setupLimit)
		res, err := c.r.o.Direct.RunToEnd(ctx, c.caller, id, direct.ExecRequest{Command: ag.Setup, Env: env, Timeout: limit})
		if err != nil {
			return Output{}, fmt.Errorf("setup: %w", err)
		}
		if res.TimedOut {
			return Output{}, &AgentFailed{Message: fmt.Sprintf("the agent's setup did not finish within %s: %s", limit, tail(res.Stderr, 2000))}
		}
		if res.ExitCode != 0 {
			return Output{}, &AgentFailed{Message: fmt.Sprintf("the agent's setup exited with status %d: %s", res.ExitCode, tail(res.Stderr, 2000))}
		}
	}
	res, err := c.r.o.Direct.Exec(ctx, c.caller, id, direct.ExecRequest{
		Command: "mkdir -p " + artifacts.Dir + " && exec bash -c " + shellQuote(ag.Command),
		Env:     env, Stdin: []byte(c.req.Prompt), Timeout: c.timeout(), Background: true, KeepAlive: true,
	})
	if err != nil {
		return Output{}, fmt.Errorf("start the agent: %w", err)
	}
	if err := c.r.o.Direct.WriteFile(ctx, c.caller, id, execMarker, 0o600, strings.NewReader(res.ID)); err != nil {
		return Output{}, fmt.Errorf("record the agent's exec: %w", err)
	}
	if err := c.event(ctx, "exec.started", "exec.started", map[string]any{
		"sandbox_id": id, "exec_id": res.ID, "agent": c.req.Agent, "timeout_seconds": c.req.TimeoutSeconds,
		"message": "agent " + c.req.Agent + " started",
	}); err != nil {
		return Output{}, err
	}
	c.log.Info("agent started", "sandbox", id, "exec", res.ID)
	return Output{SandboxID: id, ExecID: res.ID}, nil
}

// startedExec finds the exec an earlier attempt of provision started.
func (c *call) startedExec(ctx context.Context, sandbox string) (string, bool) {
	var b bytes.Buffer
	if _, err := c.r.o.Direct.ReadFile(ctx, c.caller, sandbox, execMarker, &b); err != nil {
		return "", false
	}
	eid := strings.TrimSpace(b.String())
	return eid, direct.ValidExecID(eid)
}

// apiURL is sandstep's URL as the sandbox reaches it: [sandboxes] api_url,
// else the URL the run was submitted to.
func (c *call) apiURL() string {
	if u := c.r.o.Direct.Config().APIURL; u != "" {
		return u
	}
	return c.req.APIURL
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// tail is the end of b, at most n bytes, as text.
func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return strings.ToValidUTF8(string(b), "")
}
