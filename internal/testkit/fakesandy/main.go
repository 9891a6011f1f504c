package fakesandy

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

	"github.com/sandstep/sandstep/config"
	"github.com/sandstep/sandstep/internal/service/logging"
)

// Running is a fake Sandy serving HTTP.
type Running struct {
	*Server
	// URL is the base URL clients use, such as http://127.0.0.1:41234.
	URL  string
	http *http.Server
	done chan struct{}
}

// Start creates a fake and serves it on addr; "" means 127.0.0.1 on a free
// port.
func Start(opts Options, addr string) (*Running, error) {
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	s, err := New(opts)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		_ = s.Close()
		return nil, fmt.Errorf("fakesandy: %w", err)
	}
	r := &Running{
		Server: s,
		URL:    "http://" + ln.Addr().String(),
		http:   &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second},
		done:   make(chan struct{}),
	}
	go func() {
		defer close(r.done)
		_ = r.http.Serve(ln)
	}()
	return r, nil
}

// Close kills every sandbox, which ends the requests still running, then
// stops serving.
func (r *Running) Close() error {
	err := r.Server.Close()
	_ = r.http.Close()
	<-r.done
	return err
}

// Main is `sandstep fake-sandy`: it serves a fake Sandy until ctx ends.
// The API key clients must send is read from the environment variable that
// --api-key-env names; when that is unset, any request is accepted.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fl := flag.NewFlagSet("fake-sandy", flag.ContinueOnError)
	fl.SetOutput(stderr)
	fl.Usage = func() {
		fmt.Fprintf(stderr, "usage: sandstep fake-sandy [flags]\n\n"+
			"Serves a fake of the Sandy sandbox API that runs commands on this machine under\n"+
			"bubblewrap, for tests and local runs of provider \"sandy\".\n\n")
		fl.PrintDefaults()
	}
	addr := fl.String("addr", "127.0.0.1:8790", "address to listen on (loopback only, unless -allow-remote)")
	allowRemote := fl.Bool("allow-remote", false, "allow a non-loopback -addr: anyone who reaches it runs commands on this machine")
	keyEnv := fl.String("api-key-env", "SANDY_API_KEY", "environment variable holding the API key clients must send; unset or empty accepts any request")
	dir := fl.String("dir", "", "directory for the sandboxes (default: a temporary directory, removed on exit)")
	admin := fl.Bool("admin", false, "serve the test-only /_fake/ endpoints (faults, preemption), which need no API key")
	ttl := fl.Duration("ttl", time.Hour, "lifetime of a sandbox created without ttl_seconds")
	teardown := fl.Duration("teardown-delay", 0, "how long GET still answers 200 after terminate")
	maxSandboxes := fl.Int("max-sandboxes", 0, "refuse creates (429) beyond this many live sandboxes; 0 = no limit")
	verbose := fl.Bool("v", false, "log every request to stderr")
	if err := fl.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if fl.NArg() > 0 {
		return fmt.Errorf("fake-sandy: unexpected arguments %q", fl.Args())
	}
	if !*allowRemote {
		if err := checkLoopback(*addr); err != nil {
			return err
		}
	}
	level := slog.LevelInfo
	if *verbose {
		level = slog.LevelDebug
	}
	opts := Options{
		APIKey:       os.Getenv(*keyEnv),
		Dir:          *dir,
		Admin:        *admin,
		DefaultTTL:   *ttl,
		MaxSandboxes: *maxSandboxes,
		Faults:       Faults{TeardownDelay: config.Duration(*teardown)},
		Logger:       slog.New(logging.NewHandler(stderr, logging.Options{Level: level, Text: true})),
	}
	r, err := Start(opts, *addr)
	if err != nil {
		return err
	}
	auth := "any request is accepted (" + *keyEnv + " is not set)"
	if opts.APIKey != "" {
		auth = "clients must send the key in " + *keyEnv
	}
	fmt.Fprintf(stdout, "fake Sandy listening on %s; %s\n", r.URL, auth)
	<-ctx.Done()
	return r.Close()
}

func checkLoopback(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("fake-sandy: -addr %q: %w", addr, err)
	}
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	return fmt.Errorf("fake-sandy: -addr %q is not a loopback address; whoever reaches the fake runs commands on this machine (use -allow-remote if you mean it)", addr)
}
