package sandboxes

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"
)

// Lifecycle events. Each is logged on one line (attribute "event"; the
// message is "sandbox " and the event in words) with the provider, owner, tenant, ledger name,
// provider id and the duration of the call behind it, and counted per
// provider in the Manager's Counters.
const (
	// EventCreated: Acquire made a new sandbox and recorded it running.
	EventCreated = "created"
	// EventReused: Acquire made nothing because the name was already the
	// owner's: its running entry's sandbox still ran (found "ledger"), or
	// the provider refused the create because the name was taken and the
	// live sandbox under it was adopted (found "name taken").
	EventReused = "reused"
	// EventFailed: Acquire returned no sandbox after asking the provider:
	// the create failed, the warm-up failed, or the entry was closed or
	// could not be marked running (stage says which).
	EventFailed = "failed"
	// EventRefused: a tenant quota refused the sandbox before any create.
	EventRefused = "refused"
	// EventCleanedUp: a sandbox was terminated (released, reaped, an
	// orphan, the sandbox of a create whose answer was lost).
	EventCleanedUp = "cleaned_up"
	// EventCleanupFailed: the provider's terminate failed; the ledger
	// entry stays live for the next release or Reconcile.
	EventCleanupFailed = "cleanup_failed"
	// EventGone: a sandbox the ledger held live had ended without us
	// (expired, preempted, a container Modal removed), found by a
	// release, a retried acquire or Reconcile.
	EventGone = "gone"
)

// Stats are the lifecycle events one provider's sandboxes saw in this
// process since Since: of one tenant's sandboxes in a Snapshot, of all in
// Manager.Stats.
type Stats struct {
	Provider string
	// Tenant is "" for sandboxes no tenant owns (an orphan without a
	// tenant label) and in a sum over tenants.
	Tenant        string
	Since         time.Time
	Created       int64
	Reused        int64
	Failed        int64
	Refused       int64
	CleanedUp     int64
	CleanupFailed int64
	Gone          int64
}

// Counters count lifecycle events per provider and tenant. Every Manager of a process
// counts into one (ProcessCounters) unless given its own, so that the
// API's view of them covers the phases, sessions and direct sandboxes that
// share its process. They are not persisted: across Lambda instances the
// log lines are the record (count them with a metric filter on "event").
type Counters struct {
	mu    sync.Mutex
	since time.Time
	by    map[statsKey]*Stats
}

type statsKey struct{ provider, tenant string }

// NewCounters returns empty counters starting now.
func NewCounters() *Counters { return &Counters{since: time.Now().UTC(), by: map[statsKey]*Stats{}} }

var processCounters = NewCounters()

// ProcessCounters are the counters every Manager without its own counts
// into.
func ProcessCounters() *Counters { return processCounters }

func (c *Counters) add(provider, tenant, event string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := statsKey{provider, tenant}
	s := c.by[k]
	if s == nil {
		s = &Stats{Provider: provider, Tenant: tenant, Since: c.since}
		c.by[k] = s
	}
	switch event {
	case EventCreated:
		s.Created++
	case EventReused:
		s.Reused++
	case EventFailed:
		s.Failed++
	case EventRefused:
		s.Refused++
	case EventCleanedUp:
		s.CleanedUp++
	case EventCleanupFailed:
		s.CleanupFailed++
	case EventGone:
		s.Gone++
	}
}

// Since is when counting started.
func (c *Counters) Since() time.Time { return c.since }

// Snapshot returns the counts of every provider and tenant that saw an
// event, by provider and tenant.
func (c *Counters) Snapshot() []Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]Stats, 0, len(c.by))
	for _, s := range c.by {
		out = append(out, *s)
	}
	slices.SortFunc(out, func(a, b Stats) int {
		if c := strings.Compare(a.Provider, b.Provider); c != 0 {
			return c
		}
		return strings.Compare(a.Tenant, b.Tenant)
	})
	return out
}

// Sum adds o's counts to s's.
func (s *Stats) Sum(o Stats) {
	s.Created += o.Created
	s.Reused += o.Reused
	s.Failed += o.Failed
	s.Refused += o.Refused
	s.CleanedUp += o.CleanedUp
	s.CleanupFailed += o.CleanupFailed
	s.Gone += o.Gone
}

// Stats returns the counts of this Manager's provider in its counters,
// over every tenant.
func (m *Manager) Stats() Stats {
	sum := Stats{Provider: m.name, Since: m.counters.Since()}
	for _, s := range m.counters.Snapshot() {
		if s.Provider == m.name {
			sum.Sum(s)
		}
	}
	return sum
}

// target is the sandbox an event is about.
type target struct {
	owner, tenant, name, id string
}

// record logs one lifecycle event and counts it. attrs add what the event
// knows beyond the target (reason, stage, err, network).
func (m *Manager) record(ctx context.Context, level slog.Level, event string, t target, took time.Duration, attrs ...any) {
	m.counters.add(m.name, t.tenant, event)
	args := append([]any{
		"event", event, "provider", m.name, "owner", t.owner, "tenant", t.tenant,
		"name", t.name, "sandbox_id", t.id, "duration", took,
	}, attrs...)
	m.log.Log(ctx, level, "sandbox "+strings.ReplaceAll(event, "_", " "), args...)
}
