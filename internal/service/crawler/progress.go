package crawler

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
)

// ProgressWriter writes progress lines, each with one Write call so that
// lines from concurrent workers never interleave and a reader tailing the
// stream sees whole lines as soon as they exist.
type ProgressWriter struct {
	mu sync.Mutex
	ws []io.Writer
}

// NewProgressWriter writes to every w; unbuffered writers (os.Stdout, an
// *os.File) make each line visible at once.
func NewProgressWriter(w ...io.Writer) *ProgressWriter {
	return &ProgressWriter{ws: w}
}

// Report writes p as one line. A writer that fails (a closed pipe) is not
// retried: progress is advisory and the output file is what counts.
func (pw *ProgressWriter) Report(p Progress) {
	b, err := json.Marshal(p)
	if err != nil {
		return
	}
	line := make([]byte, 0, len(ProgressPrefix)+len(b)+1)
	line = append(append(append(line, ProgressPrefix...), b...), '\n')
	pw.mu.Lock()
	defer pw.mu.Unlock()
	for _, w := range pw.ws {
		_, _ = w.Write(line)
	}
}

// WriteOutput writes out as JSON to path atomically: a reader sees the old
// file or the whole new one, never a half-written file, even when the
// process is killed while writing.
func WriteOutput(path string, out Output) error {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(out); err != nil {
		return fmt.Errorf("encode output: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("write output: %w", err)
	}
	defer os.Remove(tmp.Name()) // after a successful rename this finds nothing
	if _, err := tmp.Write(buf.Bytes()); err != nil {
		tmp.Close()
		return fmt.Errorf("write output: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("write output: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write output: %w", err)
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return fmt.Errorf("write output: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("write output: %w", err)
	}
	return nil
}
