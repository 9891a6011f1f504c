package fakedeno

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/sandstep/sandstep/internal/service/logging"
)

// Running is a fake Deno serving its planes on 127.0.0.1.
type Running struct {
	*Server
	// ConsoleURL and SandboxURL are what DENO_DEPLOY_ENDPOINT and
	// DENO_SANDBOX_ENDPOINT (the SDK's apiEndpoint and sandboxEndpoint)
	// take; ProxyURL is the sandboxes' way out.
	ConsoleURL, SandboxURL, ProxyURL string
	servers                          []*http.Server
	done                             chan struct{}
}

// Start makes a fake and serves it: the console on consoleAddr, the
// regional API on sandboxAddr ("" for either: a free port on 127.0.0.1), the
// proxy on a free port.
func Start(opts Options, consoleAddr, sandboxAddr string) (*Running, error) {
	s, err := New(opts)
	if err != nil {
		return nil, err
	}
	r := &Running{Server: s, done: make(chan struct{})}
	var lns []net.Listener
	for _, addr := range []string{consoleAddr, sandboxAddr, ""} {
		if addr == "" {
			addr = "127.0.0.1:0"
		}
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			for _, l := range lns {
				_ = l.Close()
			}
			_ = s.Close()
			return nil, fmt.Errorf("fakedeno: %w", err)
		}
		lns = append(lns, ln)
	}
	r.ConsoleURL = "http://" + lns[0].Addr().String()
	r.SandboxURL = "http://" + lns[1].Addr().String()
	r.ProxyURL = "http://" + lns[2].Addr().String()
	s.proxyAddr = lns[2].Addr().String()
	handlers := []http.Handler{s.Console(), s.Regional(), s.Proxy()}
	left := len(lns)
	finished := make(chan struct{}, left)
	for i, ln := range lns {
		srv := &http.Server{Handler: handlers[i], ReadHeaderTimeout: 10 * time.Second}
		r.servers = append(r.servers, srv)
		go func() {
			_ = srv.Serve(ln)
			finished <- struct{}{}
		}()
	}
	go func() {
		for range left {
			<-finished
		}
		close(r.done)
	}()
	return r, nil
}

// Close stops every sandbox, which closes their sockets, then stops serving.
func (r *Running) Close() error {
	err := r.Server.Close()
	for _, srv := range r.servers {
		_ = srv.Close()
	}
	<-r.done
	return err
}

// Main is `sandstep fake-deno`: it serves a fake Deno until ctx ends. The
// token clients must send is read from the variable -token-env names.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fl := flag.NewFlagSet("fake-deno", flag.ContinueOnError)
	fl.SetOutput(stderr)
	fl.Usage = func() {
		fmt.Fprintf(stderr, "usage: sandstep fake-deno [flags]\n\n"+
			"Serves a fake of Deno Sandbox (the console REST API and the regional WebSocket\n"+
			"JSON-RPC API) that runs commands on this machine under bubblewrap, for tests and\n"+
			"local runs of provider \"deno\".\n\n")
		fl.PrintDefaults()
	}
	addr := fl.String("addr", "127.0.0.1:8791", "address of the console API (console_url)")
	sandboxAddr := fl.String("sandbox-addr", "127.0.0.1:8792", "address of the regional sandbox API (sandbox_url)")
	tokenEnv := fl.String("token-env", "DENO_DEPLOY_TOKEN", "environment variable holding the token clients must send")
	org := fl.String("org", "", "organisation a personal (ddp_) token must name in X-Deno-Org")
	dir := fl.String("dir", "", "directory for sandboxes, volumes and snapshots (default: a temporary directory, removed on exit)")
	maxSandboxes := fl.Int("max-sandboxes", 5, "running sandboxes allowed at once, as Deno's organisation limit")
	verbose := fl.Bool("v", false, "log every request to stderr")
	if err := fl.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if fl.NArg() > 0 {
		return fmt.Errorf("fake-deno: unexpected arguments %q", fl.Args())
	}
	for _, a := range []string{*addr, *sandboxAddr} {
		if err := checkLoopback(a); err != nil {
			return err
		}
	}
	token := os.Getenv(*tokenEnv)
	if token == "" {
		return fmt.Errorf("fake-deno: set %s to the token clients must send (ddo_... for an organisation token)", *tokenEnv)
	}
	level := slog.LevelInfo
	if *verbose {
		level = slog.LevelDebug
	}
	r, err := Start(Options{
		Token: token, Org: *org, Dir: *dir, MaxSandboxes: *maxSandboxes,
		Logger: slog.New(logging.NewHandler(stderr, logging.Options{Level: level, Text: true})),
	}, *addr, *sandboxAddr)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "fake Deno: console %s, sandboxes %s; clients send the token in %s\n", r.ConsoleURL, r.SandboxURL, *tokenEnv)
	<-ctx.Done()
	return r.Close()
}

func checkLoopback(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("fake-deno: address %q: %w", addr, err)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return fmt.Errorf("fake-deno: %q is not a loopback address; whoever reaches the fake runs commands on this machine", addr)
	}
	return nil
}
