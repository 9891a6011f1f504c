package direct

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sandstep/sandstep/internal/service/store"
)

// staleCreate is how long a record may stay "creating": longer than any
// create runs (the API's request, a Lambda's 15 minutes at most).
const staleCreate = 16 * time.Minute

// ReapCounts is what one Reap did.
type ReapCounts struct {
	Expiring int `json:"sandboxes_expiring"`
	Expired  int `json:"sandboxes_expired"`
	Idle     int `json:"sandboxes_idle"`
	// Closed: records whose sandbox the ledger had already closed (the
	// cascade's children found by the reaper, a sandbox gone at the
	// provider).
	Closed int `json:"sandbox_records_closed"`
}

// Reap is the reaper's pass over direct sandboxes: it records
// sandbox.expiring before a sandbox's end, terminates (with its children)
// a sandbox past its end or idle past [sandboxes] idle_timeout, and closes
// the records of sandboxes whose ledger entry closed. Idleness is what this
// service saw: API calls, execs (a background one only with keep_alive)
// and requests to exposed ports; what a process inside the sandbox does
// on its own, the network it polls included, is not activity.
func (s *Service) Reap(ctx context.Context, now time.Time) (ReapCounts, error) {
	var c ReapCounts
	live, err := s.o.Store.DirectListLive(ctx)
	if err != nil {
		return c, err
	}
	cfg := s.o.Config
	var errs []error
	for _, d := range live {
		if d.State == store.DirectCreating {
			if now.Sub(d.CreatedAt) < staleCreate {
				continue
			}
			// Its create was cut off (the server stopped mid-create): no
			// client got it. The release finds the sandbox by its ledger
			// name, if the provider made it, and closes the record.
			if _, err := s.terminate(ctx, d, "its create did not finish"); err != nil {
				errs = append(errs, err)
				continue
			}
			c.Closed++
			continue
		}
		if gone, err := s.ledgerClosed(ctx, d); err != nil || gone {
			if err != nil {
				errs = append(errs, err)
				continue
			}
			// Past its end, the ledger's pass reaped it at its deadline:
			// still an expiry to its clients.
			ev, n := store.DirectEvent{Type: "sandbox.terminated", At: now, Message: "the sandbox is gone (its parent ended, or the provider ended it)"}, &c.Closed
			if !now.Before(d.EndsAt) {
				ev, n = store.DirectEvent{Type: "sandbox.expired", At: now, Message: "its lifetime ended"}, &c.Expired
			}
			if closed, err := s.o.Store.DirectClose(ctx, d.ID, ev.Message, ev); err != nil {
				errs = append(errs, err)
			} else if closed {
				*n++
			}
			continue
		}
		idleFor := now.Sub(latest(d.LastActive, d.KeepAliveUntil))
		switch {
		case !now.Before(d.EndsAt):
			if err := s.expire(ctx, d, now, "its lifetime ended"); err != nil {
				errs = append(errs, err)
				continue
			}
			c.Expired++
		case cfg.IdleTimeout > 0 && idleFor >= cfg.IdleTimeout.D():
			if err := s.expire(ctx, d, now, fmt.Sprintf("idle for %s", idleFor.Round(time.Second))); err != nil {
				errs = append(errs, err)
				continue
			}
			c.Idle++
		case !d.Expiring && (cfg.ExpiringNotice > 0 && !now.Before(d.EndsAt.Add(-cfg.ExpiringNotice.D())) ||
			cfg.IdleTimeout > 0 && cfg.ExpiringNotice > 0 && idleFor >= cfg.IdleTimeout.D()-cfg.ExpiringNotice.D()):
			ends := d.EndsAt
			if idleEnd := latest(d.LastActive, d.KeepAliveUntil).Add(cfg.IdleTimeout.D()); cfg.IdleTimeout > 0 && idleEnd.Before(ends) {
				ends = idleEnd
			}
			added, err := s.o.Store.DirectEventAdd(ctx, d.ID, store.DirectEvent{Type: "sandbox.expiring", At: now,
				Message: fmt.Sprintf("ends at %s unless used", ends.UTC().Format(time.RFC3339))}, true)
			if err != nil {
				errs = append(errs, err)
			} else if added {
				c.Expiring++
			}
		}
	}
	return c, errors.Join(errs...)
}

func latest(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// ledgerClosed reports whether a running record's ledger entry is closed.
func (s *Service) ledgerClosed(ctx context.Context, d store.DirectSandbox) (bool, error) {
	e, err := s.o.Sandboxes.Find(ctx, d.Ledger)
	if errors.Is(err, store.ErrNotFound) {
		return d.State == store.DirectRunning, nil
	}
	if err != nil {
		return false, err
	}
	return e.State == store.LedgerTerminated, nil
}

// expire terminates a sandbox tree with a sandbox.expired event.
func (s *Service) expire(ctx context.Context, d store.DirectSandbox, now time.Time, why string) error {
	if _, err := s.o.Store.DirectEventAdd(ctx, d.ID, store.DirectEvent{Type: "sandbox.expired", At: now, Message: why}, false); err != nil {
		return err
	}
	_, err := s.terminate(ctx, d, "expired: "+why)
	if err == nil {
		s.log.Info("direct sandbox expired", "sandbox", d.ID, "tenant", d.Tenant, "why", why)
	}
	return err
}
