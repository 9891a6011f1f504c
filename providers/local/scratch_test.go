package local

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/sandstep/sandstep/providers"
)

func TestScratchTiming(t *testing.T) {
	e := newEnv(t, nil)
	var cr, ex, ex2, term []time.Duration
	for range 30 {
		t0 := time.Now()
		sb, err := e.p.Create(e.ctx, providers.CreateSpec{})
		if err != nil {
			t.Fatal(err)
		}
		t1 := time.Now()
		e.p.Exec(e.ctx, sb.ID, providers.ExecRequest{Argv: []string{"true"}})
		t2 := time.Now()
		e.p.Exec(e.ctx, sb.ID, providers.ExecRequest{Argv: []string{"true"}})
		t3 := time.Now()
		e.p.Terminate(e.ctx, sb.ID)
		t4 := time.Now()
		cr = append(cr, t1.Sub(t0))
		ex = append(ex, t2.Sub(t1))
		ex2 = append(ex2, t3.Sub(t2))
		term = append(term, t4.Sub(t3))
	}
	for _, d := range [][]time.Duration{cr, ex, ex2, term} {
		slices.Sort(d)
		fmt.Println(d[len(d)/2], d[len(d)*9/10])
	}
}
