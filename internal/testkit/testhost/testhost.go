// Package testhost measures the host a test runs on: how much memory the
// machine has available while a sandbox tries to take it.
package testhost

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"
)

// MemAvailable is the kernel's estimate of the memory available for new
// work (MemAvailable in /proc/meminfo), in bytes.
func MemAvailable() (int64, error) {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, err
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if v, ok := bytes.CutPrefix(sc.Bytes(), []byte("MemAvailable:")); ok {
			kb, err := strconv.ParseInt(string(bytes.TrimSuffix(bytes.TrimSpace(v), []byte(" kB"))), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("MemAvailable %q: %w", v, err)
			}
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("no MemAvailable in /proc/meminfo")
}

// MemoryWatch samples MemAvailable until Stop.
type MemoryWatch struct {
	before int64
	mu     sync.Mutex
	lowest int64
	err    error
	done   chan struct{}
	ended  chan struct{}
}

// WatchMemory starts sampling every interval, for at most limit.
func WatchMemory(interval, limit time.Duration) (*MemoryWatch, error) {
	before, err := MemAvailable()
	if err != nil {
		return nil, err
	}
	w := &MemoryWatch{before: before, lowest: before, done: make(chan struct{}), ended: make(chan struct{})}
	go func() {
		defer close(w.ended)
		deadline := time.After(limit)
		for {
			select {
			case <-w.done:
				return
			case <-deadline:
				return
			case <-time.After(interval):
			}
			v, err := MemAvailable()
			w.mu.Lock()
			if err != nil && w.err == nil {
				w.err = err
			}
			w.lowest = min(w.lowest, v)
			w.mu.Unlock()
		}
	}()
	return w, nil
}

// Stop ends the sampling and returns the largest drop of MemAvailable
// below its value at the start.
func (w *MemoryWatch) Stop() (drop int64, err error) {
	close(w.done)
	<-w.ended
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.before - w.lowest, w.err
}
