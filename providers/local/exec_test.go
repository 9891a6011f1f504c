package local

import (
	"testing"

	"github.com/sandstep/sandstep/providers"
)

func TestCreateExecTerminate(t *testing.T) {
	e := newEnv(t, nil)
	sb := e.create(providers.CreateSpec{Name: "job-1", Labels: map[string]string{"sandstep.job": "job-1"}})
	if out := e.sh(sb.ID, "echo hello; id -u; hostname; pwd"); out != "hello\n1000\n"+sb.ID+"\n/workspace\n" {
		t.Errorf("output %q", out)
	}
	got, err := e.p.Get(e.ctx, sb.ID)
	if err != nil || got.Name != "job-1" || got.State != providers.StateRunning {
		t.Errorf("Get = %+v, %v", got, err)
	}
	if err := e.p.Terminate(e.ctx, sb.ID); err != nil {
		t.Fatalf("Terminate: %v", err)
	}
	_, err = e.p.Get(e.ctx, sb.ID)
	wantCode(t, "Get after Terminate", err, providers.NotFound)
	_, err = e.p.Exec(e.ctx, sb.ID, providers.ExecRequest{Argv: []string{"true"}})
	wantCode(t, "Exec after Terminate", err, providers.NotFound)
	if err := e.p.Terminate(e.ctx, sb.ID); err != nil {
		t.Errorf("second Terminate: %v", err)
	}
	if err := e.p.Terminate(e.ctx, "sbx-0000000000000000"); err != nil {
		t.Errorf("Terminate of an unknown id: %v", err)
	}
}
