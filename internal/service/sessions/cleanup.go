package sessions

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandstep/sandstep/internal/service/sandboxes"
	"github.com/sandstep/sandstep/internal/service/store"
)

// The scheduled cleanup's share of the sessions. Each method takes the
// time the pass runs at (tests move it) and returns how many sessions it
// changed; every action is a conditional write or idempotent, so passes
// may overlap and repeat.

// cleanupWorkers bounds how many sessions one step handles at once.
const cleanupWorkers = 8

// ExpireIdle deletes the sessions idle past the volume TTL at now: their
// sandboxes, volumes and records. The deletion begins with a conditional
// write that holds only while the session is idle and still expired, so a
// session a run holds, or used since it was listed, is left alone.
func (s *Service) ExpireIdle(ctx context.Context, now time.Time) (int, error) {
	list, err := s.st.ListSessions(ctx, store.SessionIdle, now, 0)
	if err != nil {
		return 0, err
	}
	return forEach(ctx, list, func(sess store.Session) (bool, error) {
		got, err := s.st.BeginDelete(ctx, sess.ID, now)
		if errors.Is(err, store.ErrConflict) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		_, err = s.finishDelete(ctx, got, EventExpired, "expired")
		return err == nil, err
	})
}

// FinishDeletions completes deletions that stopped half way (a process
// died, a volume was still busy): every session in state deleting.
func (s *Service) FinishDeletions(ctx context.Context) (int, error) {
	list, err := s.st.ListSessions(ctx, store.SessionDeleting, time.Now().AddDate(100, 0, 0), 0)
	if err != nil {
		return 0, err
	}
	return forEach(ctx, list, func(sess store.Session) (bool, error) {
		typ, reason := EventDeleted, "deleted on request"
		if !sess.IdleExpiresAt.After(time.Now()) {
			typ, reason = EventExpired, "expired"
		}
		_, err := s.finishDelete(ctx, sess, typ, reason)
		return err == nil, err
	})
}

// CloseIdleSandboxes closes the sandboxes of sessions unused for
// sandbox_idle_minutes at now. The record lets go of the sandbox first, at
// the version read, so a run that began since keeps it.
func (s *Service) CloseIdleSandboxes(ctx context.Context, now time.Time) (int, error) {
	return s.CloseSandboxesUnusedSince(ctx, now.Add(-s.cfg.SandboxIdle()))
}

// EndStaleRuns takes back sessions held by runs that cannot still be
// going (their process died): they become idle, so the TTL applies again.
func (s *Service) EndStaleRuns(ctx context.Context, now time.Time) (int, error) {
	return s.EndRunsHeldBefore(ctx, now.Add(-s.staleAfter()))
}

// ExpiringWarning is how long before its expiry a session gets its
// session.expiring event.
func (s *Service) ExpiringWarning() time.Duration {
	return min(max(5*time.Minute, 2*s.cfg.ReaperInterval.D()), s.ttl()/2)
}

// WarnExpiring adds a session.expiring event to each session that will
// expire within ExpiringWarning of now, once per expiry time.
func (s *Service) WarnExpiring(ctx context.Context, now time.Time) (int, error) {
	list, err := s.st.ListSessions(ctx, store.SessionIdle, now.Add(s.ExpiringWarning()), 0)
	if err != nil {
		return 0, err
	}
	return forEach(ctx, list, func(sess store.Session) (bool, error) {
		if !sess.IdleExpiresAt.After(now) {
			return false, nil
		}
		wrote := s.event(ctx, sess.ID, event{
			typ:  EventExpiring,
			data: map[string]any{"expires_at": sess.IdleExpiresAt, "volume": sess.VolumeSlug},
			once: "expiring:" + strconv.FormatInt(sess.IdleExpiresAt.UnixMilli(), 10),
		})
		return wrote, nil
	})
}

// SandboxWanted reports whether a live ledger entry owned by a session is
// a sandbox the session uses or may be about to use. Call it with entries
// listed before the call: a session that is idle and does not name the
// sandbox then cannot be creating it, since a run creates its sandbox
// while holding the session and names it before letting go.
func (s *Service) SandboxWanted(ctx context.Context, e store.LedgerEntry) (bool, error) {
	owner := sandboxes.ParseOwner(e.Owner)
	if owner.Kind != sandboxes.KindSession {
		return false, errors.New("not a session's sandbox: " + e.Owner)
	}
	sess, err := s.st.GetSession(ctx, owner.Key)
	if errors.Is(err, store.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	switch sess.State {
	case store.SessionRunning:
		return true, nil
	case store.SessionIdle:
		return e.ProviderID != "" && sess.SandboxID == e.ProviderID, nil
	}
	return false, nil
}

// forEach runs fn on every session, a few at a time, and counts the ones
// it changed. Errors do not stop the others.
func forEach(ctx context.Context, list []store.Session, fn func(store.Session) (bool, error)) (int, error) {
	var (
		n    atomic.Int64
		mu   sync.Mutex
		errs []error
		wg   sync.WaitGroup
	)
	work := make(chan store.Session)
	for range min(cleanupWorkers, len(list)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for sess := range work {
				changed, err := fn(sess)
				if changed {
					n.Add(1)
				}
				if err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}
		}()
	}
	for _, sess := range list {
		if ctx.Err() != nil {
			break
		}
		work <- sess
	}
	close(work)
	wg.Wait()
	if ctx.Err() != nil {
		errs = append(errs, ctx.Err())
	}
	return int(n.Load()), errors.Join(errs...)
}
