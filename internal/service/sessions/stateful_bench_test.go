package sessions_test

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/sandstep/sandstep/internal/service/sessions"
	"github.com/sandstep/sandstep/providers"
)

// BenchmarkStatefulRun is a warm stateful run over HTTP (its interpreter
// up) next to a stateless run of the same code in the same session and
// the interpreter's bare start on this machine (`python3 -c pass`,
// `node -e 0`) and a warm shell run of `true` in the same session, the
// floor of any run over HTTP (its session record, the run's record, the
// exec), each iteration timing all four: x-start is the stateful run's
// median over the interpreter start's, x-stateless the stateless run's
// over the stateful one's, x-shell-true the stateful run's over the
// floor. store-calls/op counts the session store's calls of one run.
func BenchmarkStatefulRun(b *testing.B) {
	e := newEnv(b, envConfig{})
	for _, c := range []struct {
		lang, code string
		start      []string
	}{
		{"python", "1 + 1", []string{sandboxBinary("python3"), "-c", "pass"}},
		{"javascript", "1 + 1", []string{sandboxBinary("node"), "-e", "0"}},
	} {
		b.Run(c.lang, func(b *testing.B) {
			sid := "bench-stateful-" + c.lang
			wantOK(b, e.runStateful(tokenAcme, sid, c.lang, c.code, 0))
			wantOK(b, e.run(tokenAcme, sid, "shell", "true"))
			var stateful, stateless, start, shell []time.Duration
			before := e.st.Stats()
			for b.Loop() {
				t := time.Now()
				if err := exec.Command(c.start[0], c.start[1:]...).Run(); err != nil {
					b.Fatalf("%v: %v", c.start, err)
				}
				start = append(start, time.Since(t))
				t = time.Now()
				wantOK(b, e.runStateful(tokenAcme, sid, c.lang, c.code, 0))
				stateful = append(stateful, time.Since(t))
				t = time.Now()
				r := e.do(http.MethodPost, "/v1/sessions/"+sid+"/run", tokenAcme, map[string]any{"code": c.code, "language": c.lang})
				if r.status != http.StatusOK {
					b.Fatalf("stateless run: %d %s", r.status, r.body)
				}
				stateless = append(stateless, time.Since(t))
				t = time.Now()
				wantOK(b, e.run(tokenAcme, sid, "shell", "true"))
				shell = append(shell, time.Since(t))
			}
			b.StopTimer()
			for _, s := range [][]time.Duration{stateful, stateless, start, shell} {
				slices.Sort(s)
			}
			ms := func(s []time.Duration) float64 { return float64(s[len(s)/2]) / float64(time.Millisecond) }
			b.ReportMetric(ms(stateful), "stateful-ms-p50")
			b.ReportMetric(ms(stateless), "stateless-ms-p50")
			b.ReportMetric(ms(start), "start-ms-p50")
			b.ReportMetric(ms(stateful)/ms(start), "x-start")
			b.ReportMetric(ms(stateless)/ms(stateful), "x-stateless")
			b.ReportMetric(ms(shell), "shell-true-ms-p50")
			b.ReportMetric(ms(stateful)/ms(shell), "x-shell-true")
			b.ReportMetric(float64(e.st.Stats().Sub(before).Total())/float64(3*len(stateful)), "store-calls/op")
		})
	}
}

// sandboxBinary is the program the sandboxes run for name (their PATH
// starts at /usr/local/bin, /usr/bin), rather than a shim this machine's
// own PATH may put first.
func sandboxBinary(name string) string {
	for _, dir := range []string{"/usr/local/bin", "/usr/bin", "/bin"} {
		if _, err := os.Stat(dir + "/" + name); err == nil {
			return dir + "/" + name
		}
	}
	return name
}

// BenchmarkStatefulExec is the interpreter's part of a warm stateful run:
// the run's exec through the provider plugin (gRPC, the sandbox's agent,
// the client shell, the interpreter), without HTTP and the session store,
// next to a warm exec of `true` in the same sandbox. x-exec-true is the
// stateful exec's median over the `true` one's.
func BenchmarkStatefulExec(b *testing.B) {
	e := newEnv(b, envConfig{})
	ctx := context.Background()
	for _, lang := range []string{"python", "javascript"} {
		b.Run(lang, func(b *testing.B) {
			sid := "bench-exec-" + lang
			wantOK(b, e.runStateful(tokenAcme, sid, lang, "1 + 1", 0))
			sbs, err := e.stack.Provider.List(ctx, providers.ListFilter{Labels: map[string]string{providers.LabelTenant: "acme", providers.LabelSession: sid}})
			if err != nil || len(sbs) != 1 {
				b.Fatalf("the session's sandbox: %v (%d found)", err, len(sbs))
			}
			id := sbs[0].ID
			var stateful, truth []time.Duration
			for b.Loop() {
				t := time.Now()
				res, err := e.stack.Provider.Exec(ctx, id, sessions.StatefulRequest(lang, "1 + 1"))
				if err != nil || res.ExitCode != 0 {
					b.Fatalf("stateful exec: %v, exit %d", err, res.ExitCode)
				}
				stateful = append(stateful, time.Since(t))
				t = time.Now()
				if res, err = e.stack.Provider.Exec(ctx, id, providers.ExecRequest{Argv: []string{"true"}}); err != nil || res.ExitCode != 0 {
					b.Fatalf("exec true: %v, exit %d", err, res.ExitCode)
				}
				truth = append(truth, time.Since(t))
			}
			b.StopTimer()
			slices.Sort(stateful)
			slices.Sort(truth)
			ms := func(s []time.Duration) float64 { return float64(s[len(s)/2]) / float64(time.Millisecond) }
			b.ReportMetric(ms(stateful), "stateful-exec-ms-p50")
			b.ReportMetric(ms(truth), "exec-true-ms-p50")
			b.ReportMetric(ms(stateful)/ms(truth), "x-exec-true")
		})
	}
}
