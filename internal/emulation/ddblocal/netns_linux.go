package ddblocal

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// DynamoDB Local 3.x listens on every interface and has no option to
// choose one, and it takes any credentials. On Linux it therefore runs in a
// network namespace of its own, where the only interface is a loopback
// nothing else shares: no other machine, and no sandbox, can reach it
// whatever it binds. What reaches it is a listener on the host's
// 127.0.0.1, created here and handed to a small helper inside that
// namespace, which relays each connection to the JVM (the kernel splices
// the bytes between the two TCP sockets). The endpoint stays an ordinary
// http://127.0.0.1:PORT.
//
// The helper is this very binary, run again with helperEnv set: the init
// function below catches it before anything else runs. As root the
// namespace is made directly; otherwise inside a user namespace of the
// caller's own uid, as bubblewrap does.

// helperEnv marks the process as the namespace helper; its value is the
// JVM's port inside the namespace.
const helperEnv = "SANDSTEP_DDBLOCAL_NETNS_HELPER"

// fdListener is the host listener in the helper.
const fdListener = 3

func init() {
	if port := os.Getenv(helperEnv); port != "" {
		os.Exit(runHelper(port, os.Args[1:]))
	}
}

// isolatedCommand returns the command that runs java with args in a
// network namespace of its own, relaying connections from ln to it.
func isolatedCommand(java string, args []string, ln *net.TCPListener) (*exec.Cmd, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("dynamodb local: locating this program to isolate the JVM: %w", err)
	}
	lf, err := ln.File()
	if err != nil {
		return nil, err
	}
	port := ln.Addr().(*net.TCPAddr).Port
	cmd := exec.Command(self, append([]string{java}, args...)...)
	cmd.Env = append(os.Environ(), helperEnv+"="+strconv.Itoa(port))
	cmd.ExtraFiles = []*os.File{lf}
	attr := sysProcAttr()
	attr.Cloneflags = unix.CLONE_NEWNET
	if os.Geteuid() != 0 {
		attr.Cloneflags |= unix.CLONE_NEWUSER
		attr.UidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Geteuid(), Size: 1}}
		attr.GidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getegid(), Size: 1}}
		attr.GidMappingsEnableSetgroups = false
	}
	cmd.SysProcAttr = attr
	return cmd, nil
}

// closeListenerFile closes the parent's copy of the listener handed to the
// helper; the helper holds its own.
func closeListenerFile(cmd *exec.Cmd) {
	for _, f := range cmd.ExtraFiles {
		f.Close()
	}
}

// runHelper is the helper: loopback up, the JVM started, connections
// relayed until the JVM ends, whose exit status it returns.
func runHelper(port string, argv []string) int {
	fail := func(format string, args ...any) int {
		fmt.Fprintf(os.Stderr, "dynamodb local isolation: "+format+"\n", args...)
		return 125
	}
	if len(argv) == 0 {
		return fail("no command")
	}
	if err := loopbackUp(); err != nil {
		return fail("bringing up the loopback of the JVM's network namespace: %v", err)
	}
	ln, err := net.FileListener(os.NewFile(fdListener, "listener"))
	if err != nil {
		return fail("the host listener: %v", err)
	}
	// SIGTERM is for the JVM, which gets it from the process group; the
	// helper ends when the JVM has.
	signal.Ignore(syscall.SIGTERM, syscall.SIGINT)
	// The parent-death signal follows the thread that started the child.
	runtime.LockOSThread()
	jvm := exec.Command(argv[0], argv[1:]...)
	jvm.Stdout, jvm.Stderr = os.Stdout, os.Stderr
	jvm.Env = withoutEnv(os.Environ(), helperEnv)
	jvm.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := jvm.Start(); err != nil {
		return fail("starting %s: %v", argv[0], err)
	}
	go relayAll(ln, net.JoinHostPort("127.0.0.1", port))
	err = jvm.Wait()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee) && ee.ExitCode() >= 0:
		return ee.ExitCode()
	}
	return 1
}

func withoutEnv(env []string, key string) []string {
	out := env[:0:0]
	for _, kv := range env {
		if len(kv) <= len(key) || kv[:len(key)+1] != key+"=" {
			out = append(out, kv)
		}
	}
	return out
}

// loopbackUp brings up lo in the current network namespace.
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return err
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	return unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr)
}

// relayAll relays every connection of ln to target until ln fails.
func relayAll(ln net.Listener, target string) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			up, err := net.Dial("tcp", target)
			if err != nil {
				// Not up yet, or gone: the client sees a closed connection.
				return
			}
			defer up.Close()
			var wg sync.WaitGroup
			wg.Add(2)
			half := func(dst, src net.Conn) {
				defer wg.Done()
				// TCP to TCP: io.Copy splices in the kernel.
				_, _ = io.Copy(dst, src)
				_ = dst.(*net.TCPConn).CloseWrite()
			}
			go half(up, c)
			go half(c, up)
			wg.Wait()
		}()
	}
}
