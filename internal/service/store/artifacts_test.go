package store_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/sandstep/sandstep/internal/service/store"
)

// TestArtifacts: a job's artifacts are kept by path, listed without their
// content, read back byte for byte, replaced by a second write, and bounded.
// A job's type is kept and is part of what makes a resubmission the same.
func TestArtifacts(t *testing.T) {
	s, _ := newStore(t)
	ctx := testCtx(t)
	job, _, err := s.CreateJob(ctx, store.NewJob{ID: "acme-agent-1", Tenant: "acme", ClientID: "agent-1", Type: store.JobTypeAgent, Request: []byte(`{}`), RequestHash: "h"})
	if err != nil || job.Type != store.JobTypeAgent {
		t.Fatalf("create: %+v %v", job, err)
	}
	if _, _, err := s.CreateJob(ctx, store.NewJob{ID: "acme-agent-1", Tenant: "acme", ClientID: "agent-1", Request: []byte(`{}`), RequestHash: "h"}); !errors.Is(err, store.ErrConflict) {
		t.Errorf("the same id as a research job: %v, want a conflict", err)
	}
	bin := []byte{0, 1, 2, 255, 'x'}
	for _, a := range []store.Artifact{
		{Path: "report.md", ContentType: "text/markdown", Data: []byte("# old")},
		{Path: "report.md", ContentType: "text/markdown", Data: []byte("# new")},
		{Path: "img/a.bin", ContentType: "application/octet-stream", Data: bin},
	} {
		if err := s.PutArtifact(ctx, job.ID, a); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.PutArtifact(ctx, job.ID, store.Artifact{Path: "big", Data: make([]byte, store.MaxArtifactBytes+1)}); !errors.Is(err, store.ErrTooLarge) {
		t.Errorf("an artifact past the limit: %v", err)
	}
	list, err := s.Artifacts(ctx, job.ID)
	if err != nil || len(list) != 2 || list[0].Path != "img/a.bin" || list[1].Path != "report.md" || list[1].Size != 5 || list[0].Data != nil {
		t.Fatalf("list: %+v %v", list, err)
	}
	got, err := s.GetArtifact(ctx, job.ID, "img/a.bin")
	if err != nil || !bytes.Equal(got.Data, bin) || got.ContentType != "application/octet-stream" {
		t.Errorf("get: %+v %v", got, err)
	}
	if got, _ := s.GetArtifact(ctx, job.ID, "report.md"); string(got.Data) != "# new" {
		t.Errorf("replaced: %q", got.Data)
	}
	if _, err := s.GetArtifact(ctx, job.ID, "nope"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("missing: %v", err)
	}
	if evs, err := s.ListEvents(ctx, job.ID, 0, 10); err != nil || len(evs) != 0 {
		t.Errorf("artifacts read as events: %v %v", evs, err)
	}
}
