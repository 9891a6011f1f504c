package soak

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sandstep/sandstep/config"
	"github.com/sandstep/sandstep/internal/service/providerhost"
	"github.com/sandstep/sandstep/internal/service/store"
	"github.com/sandstep/sandstep/internal/testkit/apitest"
	"github.com/sandstep/sandstep/providers"
)

// do calls the server's API with the dev token. Every whole answer is
// checked against the API's description, as the e2e servers' are: these
// come from a real `sandstep serve` that is killed and restarted under load.
func (w *world) do(method, path string, body any) (int, map[string]any, error) {
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, "http://"+w.addr+path, rd)
	req.Header.Set("Authorization", "Bearer "+devToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		// Cut by the server's death: not an answer to check.
		return resp.StatusCode, nil, fmt.Errorf("%s %s: %d, body cut: %w", method, path, resp.StatusCode, err)
	}
	apitest.CheckResponse(w.t, req, resp.StatusCode, resp.Header, raw)
	var out map[string]any
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &out); err != nil {
			return resp.StatusCode, nil, fmt.Errorf("%s %s: %d %s", method, path, resp.StatusCode, raw)
		}
	}
	return resp.StatusCode, out, nil
}

func (w *world) mustDo(method, path string, body any) (int, map[string]any) {
	w.t.Helper()
	code, out, err := w.do(method, path, body)
	if err != nil {
		w.t.Fatal(err)
	}
	return code, out
}

func (w *world) submit(id string, seeds []string) {
	w.t.Helper()
	code, out := w.mustDo("POST", "/v1/jobs", map[string]any{"query": "kestrel fixtures", "job_id": id, "seed_urls": seeds})
	if code != http.StatusAccepted {
		w.t.Fatalf("submit %s: %d %v", id, code, out)
	}
}

// awaitEnd follows the job's event stream until its "end" event, and
// returns the job. A stream cut by the server's death is not an end.
func (w *world) awaitEnd(ctx context.Context, id string) (map[string]any, error) {
	last := "0"
	for {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("job %s did not end: %w", id, err)
		}
		ended, seen, err := w.follow(ctx, id, last)
		if seen != "" {
			last = seen
		}
		if ended {
			// The server may die right after the end: ask until one answers.
			for {
				_, job, err := w.do("GET", "/v1/jobs/"+id, nil)
				if err == nil || ctx.Err() != nil {
					return job, err
				}
				select {
				case <-ctx.Done():
				case <-time.After(200 * time.Millisecond):
				}
			}
		}
		if err != nil {
			// The server is down or restarting: wait for it.
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
	}
}

// follow reads one event stream; it reports whether the end came and the
// id of the last event seen.
func (w *world) follow(ctx context.Context, id, after string) (bool, string, error) {
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+w.addr+"/v1/jobs/"+id+"/events", nil)
	req.Header.Set("Authorization", "Bearer "+devToken)
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Last-Event-ID", after)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false, "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return false, "", fmt.Errorf("events of %s: %d %s", id, resp.StatusCode, b)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	seen := ""
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "id: "):
			seen = strings.TrimPrefix(line, "id: ")
		case line == "event: end":
			return true, seen, nil
		}
	}
	return false, seen, errors.New("stream cut")
}

// stateStore opens the running server's DynamoDB Local.
func (w *world) stateStore() *store.Store {
	w.t.Helper()
	s := w.server()
	if s == nil {
		w.t.Fatal("no server is running")
	}
	return store.NewLocal(s.endpoint, s.prefix)
}

// provider opens the configured provider beside the server's, on the same
// state, to list what is alive there.
func (w *world) provider() providers.Provider {
	w.t.Helper()
	cfg, err := config.Load(w.cfg)
	if err != nil {
		w.t.Fatal(err)
	}
	p, err := providerhost.Open(context.Background(), cfg, "", slog.New(slog.DiscardHandler))
	if err != nil {
		w.t.Fatal(err)
	}
	w.t.Cleanup(func() { p.Close() })
	return p
}

// liveLedger lists the ledger's open entries.
func liveLedger(t testing.TB, st *store.Store) []store.LedgerEntry {
	t.Helper()
	live, err := st.LedgerListLive(context.Background(), time.Now().AddDate(100, 0, 0), 0)
	if err != nil {
		t.Fatal(err)
	}
	return live
}

// aliveSandboxes lists the provider's running sandboxes of ours.
func aliveSandboxes(t testing.TB, p providers.Provider) []providers.Sandbox {
	t.Helper()
	list, err := p.List(context.Background(), providers.ListFilter{Labels: map[string]string{providers.LabelOwner: "sandstep"}})
	if err != nil {
		t.Fatal(err)
	}
	var out []providers.Sandbox
	for _, sb := range list {
		if sb.State == "" || sb.State == providers.StateRunning {
			out = append(out, sb)
		}
	}
	return out
}

// checkEvents checks a job's events: seqs 1..n without a gap or a
// repeat, and its terminal event exactly once, saying how it ended.
func checkEvents(st *store.Store, id, status string) error {
	evs, err := st.ListEvents(context.Background(), jobKey(id), 0, store.MaxEventPage)
	for err == nil && len(evs)%store.MaxEventPage == 0 && len(evs) > 0 {
		more, merr := st.ListEvents(context.Background(), jobKey(id), evs[len(evs)-1].Seq, store.MaxEventPage)
		if merr != nil || len(more) == 0 {
			err = merr
			break
		}
		evs = append(evs, more...)
	}
	if err != nil {
		return err
	}
	finished := 0
	for i, ev := range evs {
		if ev.Seq != int64(i+1) {
			return fmt.Errorf("job %s: event %d has seq %d (lost or repeated)", id, i+1, ev.Seq)
		}
		if ev.Type == "job" {
			var d struct {
				Status string `json:"status"`
			}
			json.Unmarshal(ev.Data, &d)
			if d.Status == status {
				finished++
			}
		}
	}
	if finished != 1 {
		return fmt.Errorf("job %s: %d events saying it ended %s, want 1", id, finished, status)
	}
	return nil
}
