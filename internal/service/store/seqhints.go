package store

import "sync"

// seqHints remembers the last event seq this process saw per job, so that
// the usual single writer guesses the counter right and appends in one
// transaction, without reading the job first. It is only a hint: the
// transaction's condition on the counter decides. Bounded: when full it is
// simply emptied.
type seqHints struct {
	mu sync.Mutex
	m  map[string]int64
}

const maxSeqHints = 4096

func (h *seqHints) get(job string) (int64, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	v, ok := h.m[job]
	return v, ok
}

func (h *seqHints) set(job string, seq int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.m == nil || len(h.m) >= maxSeqHints {
		h.m = make(map[string]int64)
	}
	h.m[job] = seq
}
