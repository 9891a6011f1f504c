package local

import (
	"strings"
	"testing"

	"github.com/sandstep/sandstep/providers"
)

// A sandbox's /dev: the devices bwrap's --dev gives, read-only, shared
// memory of its own, and a devpts of its own: a pty opened in one sandbox
// is not listed in another's.
func TestSandboxDev(t *testing.T) {
	e := newEnv(t, nil)
	a := e.create(providers.CreateSpec{})
	b := e.create(providers.CreateSpec{})
	out := e.sh(a.ID, `echo x > /dev/null && head -c 3 /dev/zero | wc -c && head -c 4 /dev/urandom | wc -c && head -c 2 /dev/random | wc -c
if echo x > /dev/full 2>/dev/null; then echo full-took-it; fi
touch /dev/x 2>/dev/null && echo dev-writable; mkdir /dev/d 2>/dev/null && echo dev-writable
echo data > /dev/shm/x && cat /dev/shm/x
ls /dev`)
	want := "3\n4\n2\ndata\ncore\nfd\nfull\nnull\nptmx\npts\nrandom\nshm\nstderr\nstdin\nstdout\ntty\nurandom\nzero\n"
	if out != want {
		t.Errorf("/dev in the sandbox:\n%s\nwant\n%s", out, want)
	}
	// A pty kept open in a: a's devpts lists it, b's does not.
	e.sh(a.ID, `nohup python3 -c 'import pty, time; m, s = pty.openpty(); time.sleep(60)' >/dev/null 2>&1 &
for i in $(seq 50); do [ -e /dev/pts/0 ] && break; sleep 0.1; done`)
	if out := e.sh(a.ID, "ls /dev/pts"); !strings.Contains(out, "0\n") {
		t.Errorf("a's /dev/pts after openpty: %q", out)
	}
	if out := e.sh(b.ID, "ls /dev/pts"); out != "ptmx\n" {
		t.Errorf("b's /dev/pts shows %q; a's pty is a's", out)
	}
	if out := e.sh(b.ID, `python3 -c 'import os, pty; m, s = pty.openpty(); os.write(m, b"ping\n"); print(os.ttyname(s), os.read(s, 4).decode())'`); out != "/dev/pts/0 ping\n" {
		t.Errorf("a pty in b: %q", out)
	}
}
