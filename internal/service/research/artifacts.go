package research

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/sandstep/sandstep/internal/service/artifacts"
	"github.com/sandstep/sandstep/internal/service/store"
	"github.com/sandstep/sandstep/providers"
)

// artifactsTimeout bounds the copy, so that a sandbox that stopped
// answering does not hold the cleanup.
const artifactsTimeout = 2 * time.Minute

// keepArtifacts copies artifacts.Dir of each of the job's live sandboxes
// (the summarizing agent's charts, say) into the job's artifacts, with a
// file.written event each, through the provider's own exec and file calls,
// before Cleanup terminates them. Files past artifacts.MaxFiles or the
// size limit are named in an event and left behind. A sandbox that
// is gone has nothing to give; other failures are logged, not fatal: the
// sandboxes are terminated whatever happens here.
func (p *Phases) keepArtifacts(ctx context.Context, job store.Job, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(ctx, artifactsTimeout)
	defer cancel()
	r := &run{p: p, job: job, log: log, use: &usageMeter{}, usageKey: "artifacts"}
	r.ctx, r.cancel = context.WithCancelCause(ctx)
	defer r.cancel(nil)
	defer func() {
		if err := r.recordUsage(); err != nil {
			log.Warn("artifacts: record usage", "err", err)
		}
	}()
	entries, err := p.Sandboxes.Held(ctx, jobOwner(job))
	if err != nil {
		log.Warn("artifacts: ledger", "err", err)
		return
	}
	kept := 0
	for _, e := range entries {
		if e.ProviderID == "" {
			continue
		}
		n, err := r.copyArtifacts(e.ProviderID, kept)
		kept += n
		switch {
		case providers.IsNotFound(err):
			log.Info("artifacts: the sandbox is gone; nothing to keep", "sandbox_id", e.ProviderID)
		case err != nil:
			log.Warn("artifacts: not all were kept", "sandbox_id", e.ProviderID, "err", err)
		}
	}
	if kept > 0 {
		log.Info("artifacts kept", "files", kept)
	}
}

// copyArtifacts copies the files of one sandbox's artifacts.Dir that fit
// after the kept ones, and says how many it kept.
func (r *run) copyArtifacts(id string, before int) (int, error) {
	var list, stderr bytes.Buffer
	res, err := r.exec(id, providers.ExecRequest{Shell: artifacts.ListCommand(artifacts.Dir), Stdout: &list, Stderr: &stderr, Timeout: time.Minute})
	if err != nil {
		return 0, err
	}
	if res.ExitCode != 0 {
		return 0, fmt.Errorf("listing %s exited %d: %s", artifacts.Dir, res.ExitCode, firstLine(stderr.String()))
	}
	kept := 0
	var errs []error
	// A listing cut at its limit holds thousands of files, far past the
	// MaxFiles kept: those it leaves out would be left behind anyway.
	files, _ := artifacts.Parse(list.Bytes())
	for _, f := range files {
		name, n := f.Path, f.Size
		skip := artifacts.SkipReason(before+kept, n)
		var data bytes.Buffer
		if skip == "" {
			_, err := r.p.Provider.ReadFile(r.ctx, id, providers.ReadFileRequest{Path: artifacts.Dir + "/" + name, Limit: store.MaxArtifactBytes + 1}, &data)
			if providers.IsNotFound(err) {
				// Removed since it was listed, or the sandbox went.
				if sb, gerr := r.p.Provider.Get(r.ctx, id); providers.IsNotFound(gerr) || gerr == nil && sb.State == providers.StateTerminated {
					return kept, err
				}
				continue
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("read %s: %w", name, err))
				continue
			}
			if data.Len() > store.MaxArtifactBytes {
				skip = artifacts.SkipReason(0, int64(data.Len()))
			}
		}
		if skip != "" {
			if err := r.artifactEvent("artifact:skipped:"+name, map[string]any{"path": name, "size": n, "message": "artifact " + name + " left behind: " + skip}); err != nil {
				return kept, err
			}
			continue
		}
		a := store.Artifact{Path: name, ContentType: artifacts.ContentType(name), Data: data.Bytes()}
		if err := r.p.Store.PutArtifact(r.ctx, r.job.ID, a); err != nil {
			return kept, err
		}
		kept++
		if err := r.artifactEvent("file:"+name+":"+strconv.Itoa(data.Len()), map[string]any{
			"path": name, "size": data.Len(), "content_type": a.ContentType, "message": "artifact " + name + " kept",
		}); err != nil {
			return kept, err
		}
	}
	return kept, errors.Join(errs...)
}

// artifactEvent appends one event of the cleanup; its key makes a
// repeated cleanup add none twice.
func (r *run) artifactEvent(key string, data map[string]any) error {
	typ := "file.written"
	data["stage"], data["status"] = string(store.StepCleanup), "complete"
	if strings.HasPrefix(key, "artifact:skipped:") {
		typ, data["status"] = string(store.StepCleanup), "warning"
	}
	b, err := json.Marshal(data)
	if err != nil {
		return err
	}
	_, err = r.p.Store.AppendEvents(r.ctx, r.job.ID, []store.Event{{Key: key, Type: typ, Data: b}})
	return err
}
