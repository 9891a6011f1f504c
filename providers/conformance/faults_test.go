package conformance_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"slices"
	"testing"
	"time"

	"github.com/sandstep/sandstep/providers"
	"github.com/sandstep/sandstep/providers/conformance"
)

// A suite that passes everything proves nothing. Each test here breaks one
// behaviour of the real local provider and checks that the cases meant to
// guard it fail.

// bufferedExec delivers exec output only once the command has ended.
type bufferedExec struct{ providers.Provider }

func (b bufferedExec) Exec(ctx context.Context, id string, req providers.ExecRequest) (providers.ExecResult, error) {
	var out, errOut bytes.Buffer
	stdout, stderr := req.Stdout, req.Stderr
	req.Stdout, req.Stderr = &out, &errOut
	res, err := b.Provider.Exec(ctx, id, req)
	for _, c := range []struct {
		w   io.Writer
		buf *bytes.Buffer
	}{{stdout, &out}, {stderr, &errOut}} {
		if c.w != nil {
			_, _ = c.w.Write(c.buf.Bytes())
		}
	}
	return res, err
}

// noopTerminate says yes and does nothing.
type noopTerminate struct{ providers.Provider }

func (noopTerminate) Terminate(context.Context, string) error { return nil }

// codelessErrors loses the codes of Get's errors, as a careless plugin
// that flattens errors to strings would.
type codelessErrors struct{ providers.Provider }

func (c codelessErrors) Get(ctx context.Context, id string) (providers.Sandbox, error) {
	sb, err := c.Provider.Get(ctx, id)
	if err != nil {
		err = errors.New(err.Error())
	}
	return sb, err
}

// unfilteredList ignores the labels it is asked to filter by.
type unfilteredList struct{ providers.Provider }

func (u unfilteredList) List(ctx context.Context, f providers.ListFilter) ([]providers.Sandbox, error) {
	return u.Provider.List(ctx, providers.ListFilter{Name: f.Name})
}

// offsetIgnored reads every file from its start.
type offsetIgnored struct{ providers.Provider }

func (o offsetIgnored) ReadFile(ctx context.Context, id string, f providers.ReadFileRequest, w io.Writer) (int64, error) {
	f.Offset = 0
	return o.Provider.ReadFile(ctx, id, f, w)
}

func TestSuiteCatchesFaults(t *testing.T) {
	tests := []struct {
		name  string
		wrap  func(providers.Provider) providers.Provider
		only  []string
		fails []string
		scale float64
	}{
		{
			name: "output held until the end",
			wrap: func(p providers.Provider) providers.Provider { return bufferedExec{p} },
			only: []string{"exec-streaming", "exec-stdout-stderr"},
			// exec-stdout-stderr still passes: buffering loses no bytes.
			fails: []string{"exec-streaming"},
			// The streaming case waits a scaled minute for output that
			// never comes early.
			scale: 0.1,
		},
		{
			name:  "terminate does nothing",
			wrap:  func(p providers.Provider) providers.Provider { return noopTerminate{p} },
			only:  []string{"lifecycle", "terminate-twice", "exec-env"},
			fails: []string{"lifecycle", "terminate-twice", "no-leaks"},
		},
		{
			name:  "error codes lost",
			wrap:  func(p providers.Provider) providers.Provider { return codelessErrors{p} },
			only:  []string{"unknown-ids", "info"},
			fails: []string{"unknown-ids"},
		},
		{
			name:  "list ignores labels",
			wrap:  func(p providers.Provider) providers.Provider { return unfilteredList{p} },
			only:  []string{"list-by-labels"},
			fails: []string{"list-by-labels"},
		},
		{
			name:  "read offset ignored",
			wrap:  func(p providers.Provider) providers.Provider { return offsetIgnored{p} },
			only:  []string{"files-offset-limit", "files-round-trip"},
			fails: []string{"files-offset-limit"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			real := startLocal(t, nil)
			runID := "fault" + conformanceRunSuffix(t)
			t.Cleanup(func() { terminateRun(t, real, runID) })
			var out bytes.Buffer
			sum := conformance.RunAll(t.Context(), tc.wrap(real), conformance.Options{
				RunID:        runID,
				Only:         tc.only,
				TimeoutScale: tc.scale,
				CaseTimeout:  90 * time.Second,
			}, &out)
			var failed []string
			for _, r := range sum.Results {
				if r.Status == conformance.Fail {
					failed = append(failed, r.Name)
				}
			}
			slices.Sort(failed)
			want := slices.Sorted(slices.Values(tc.fails))
			if !slices.Equal(failed, want) {
				t.Errorf("failed cases %q, want %q; output:\n%s", failed, want, &out)
			}
		})
	}
}

// conformanceRunSuffix makes a run id from the test's name, so that what a
// broken provider leaves is easy to find and terminate afterwards.
func conformanceRunSuffix(t *testing.T) string {
	var b []byte
	for _, r := range t.Name() {
		if r >= 'a' && r <= 'z' {
			b = append(b, byte(r))
		}
	}
	return string(b[len(b)-min(len(b), 12):])
}

// terminateRun ends, with the unbroken provider, whatever a run with a
// broken one left behind.
func terminateRun(t *testing.T, p providers.Provider, runID string) {
	ctx := context.Background()
	sbs, err := p.List(ctx, providers.ListFilter{Labels: map[string]string{"sandstep.conformance.run": runID}})
	if err != nil {
		t.Errorf("List: %v", err)
	}
	for _, sb := range sbs {
		if err := p.Terminate(ctx, sb.ID); err != nil {
			t.Errorf("Terminate(%s): %v", sb.ID, err)
		}
	}
}
