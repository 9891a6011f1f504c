package sessions

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sandstep/sandstep/providers"
)

// CollectSnapshots deletes this deployment's dependency snapshots that the
// configuration no longer names and that no live sandbox booted from,
// once they have been replaced for [sessions] snapshot_grace: the time for
// processes still running the previous configuration (Lambda containers
// of the last deployment, a server not yet restarted) to finish with them.
// A snapshot is taken to be replaced when the current one was built; while
// the current one is not built yet, nothing is collected. With sessions
// off, every dependency snapshot of the deployment is unneeded, and each
// goes snapshot_grace after it was built.
//
// Where the provider lists snapshots by label, its list says which the
// deployment has; elsewhere (Deno, Modal) the store's record of the
// snapshots this deployment built does, and a deleted one leaves it.
// Which snapshots are in use the ledger says (every session sandbox's
// entry names its snapshot and is written before the create), and the
// provider's list of sandboxes too where it can list them.
// A run that races a deletion (its sandbox's create finds the snapshot
// gone) builds the snapshot again and starts from it: it never runs
// without its dependencies.
func (s *Service) CollectSnapshots(ctx context.Context, now time.Time) (int, error) {
	if s.prov == nil {
		return 0, nil
	}
	caps, err := s.capabilities(ctx)
	if err != nil {
		return 0, err
	}
	if !caps.Snapshots {
		return 0, nil
	}
	snaps, err := s.deploymentSnapshots(ctx, caps.ListSnapshots)
	if err != nil {
		return 0, err
	}
	current := ""
	if s.cfg.Enabled {
		current = s.deps.slug
	}
	var replacedAt time.Time
	if current != "" {
		found := false
		for _, sn := range snaps {
			if sn.Slug == current {
				replacedAt, found = sn.CreatedAt, true
			}
		}
		if !found {
			return 0, nil
		}
	}
	grace := s.cfg.SnapshotGrace.D()
	var due []providers.Snapshot
	for _, sn := range snaps {
		if sn.Slug == current {
			continue
		}
		if now.Sub(later(sn.CreatedAt, replacedAt)) >= grace {
			due = append(due, sn)
		}
	}
	if len(due) == 0 {
		return 0, nil
	}
	// Read after the snapshots: a sandbox created since from one of them
	// is in this list, or its create finds the snapshot gone and builds
	// it again.
	inUse, err := s.snapshotsInUse(ctx, caps.ListByLabels)
	if err != nil {
		return 0, err
	}
	n := 0
	var errs []error
	for _, sn := range due {
		if inUse[sn.Slug] {
			s.log.Info("kept an old dependency snapshot: a live sandbox booted from it", "snapshot", sn.Slug)
			continue
		}
		if err := s.prov.DeleteSnapshot(ctx, sn.Slug); err != nil && !providers.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("delete snapshot %s: %w", sn.Slug, s.hide(err)))
			continue
		}
		if !caps.ListSnapshots {
			if err := s.st.ForgetSnapshot(ctx, s.deployment, sn.Slug, sn.CreatedAt); err != nil {
				errs = append(errs, err)
				continue
			}
		}
		n++
		s.log.Info("deleted an old dependency snapshot", "snapshot", sn.Slug, "built", sn.CreatedAt, "size_bytes", sn.SizeBytes)
	}
	return n, errors.Join(errs...)
}

// deploymentSnapshots are this deployment's dependency snapshots: the
// provider's list where it can list them by label, else the store's record.
func (s *Service) deploymentSnapshots(ctx context.Context, canList bool) ([]providers.Snapshot, error) {
	if canList {
		snaps, err := s.prov.ListSnapshots(ctx, snapshotLabels(s.deployment))
		if err != nil {
			return nil, fmt.Errorf("list snapshots: %w", s.hide(err))
		}
		return snaps, nil
	}
	recorded, err := s.st.Snapshots(ctx, s.deployment)
	if err != nil {
		return nil, err
	}
	snaps := make([]providers.Snapshot, 0, len(recorded))
	for slug, built := range recorded {
		snaps = append(snaps, providers.Snapshot{Slug: slug, CreatedAt: built})
	}
	return snaps, nil
}

// snapshotsInUse are the snapshots live sandboxes booted from, whoever's
// they are, and those sandboxes are being created from: a snapshot is kept
// while any sandbox uses it. The provider is asked first, then the ledger,
// whose entries are written before their creates: a sandbox in neither
// began its create after both were read, and its run checks once the
// create answered that the snapshot is still there, building it again
// otherwise (createSandbox).
func (s *Service) snapshotsInUse(ctx context.Context, canList bool) (map[string]bool, error) {
	used := map[string]bool{}
	if canList {
		list, err := s.prov.List(ctx, providers.ListFilter{Labels: map[string]string{providers.LabelOwner: "sandstep"}})
		if err != nil {
			return nil, fmt.Errorf("list sandboxes: %w", s.hide(err))
		}
		for _, sb := range list {
			if sb.Snapshot != "" && (sb.State == providers.StateRunning || sb.State == "") {
				used[sb.Snapshot] = true
			}
		}
	}
	live, err := s.sbx.Live(ctx)
	if err != nil {
		return nil, fmt.Errorf("ledger: %w", err)
	}
	for _, e := range live {
		if slug := e.Snapshot; slug != "" {
			used[slug] = true
		}
	}
	return used, nil
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// snapshotMissing reports whether the provider says slug does not exist
// (a create's NotFound may be about the volume instead).
func (s *Service) snapshotMissing(ctx context.Context, slug string) bool {
	_, err := s.prov.GetSnapshot(ctx, slug)
	return providers.IsNotFound(err)
}

// snapshotGone forgets that the dependency snapshot exists, after a create
// found it deleted: the next EnsureSnapshot builds it again.
func (s *Service) snapshotGone() {
	s.snapMu.Lock()
	s.snapReady = false
	s.snapMu.Unlock()
}
