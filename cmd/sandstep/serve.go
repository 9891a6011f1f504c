package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/sandstep/sandstep/config"
	"github.com/sandstep/sandstep/internal/emulation/localstack"
	"github.com/sandstep/sandstep/internal/service/api"
	"github.com/sandstep/sandstep/internal/service/logging"
)

func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("serve", stdout, stderr)
	cfgPath := fs.String("config", config.DefaultPath(), "config file (env SANDSTEP_CONFIG)")
	addr := fs.String("addr", "", "listen address, loopback only unless [server] allow_non_loopback (default: [server] addr, 127.0.0.1:8080)")
	dataDir := fs.String("data-dir", "", "folder for DynamoDB Local's data and the local provider's state (default: [server] data_dir)")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	if _, err := positional(fs, args); err != nil {
		return err
	}
	logger, err := logging.New(stderr, *logLevel)
	if err != nil {
		return usageError(fs, "--log-level: %v", err)
	}
	slog.SetDefault(logger)
	srv, err := startServer(ctx, *cfgPath, *addr, *dataDir, logger)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "sandstep is serving on %s (provider %q, data in %s)\n", srv.url, srv.cfg.Provider.Name, srv.cfg.Server.DataDir)
	printBanner(stdout, srv)
	select {
	case <-ctx.Done():
		fmt.Fprintln(stdout, "shutting down: stopping jobs and sandboxes")
	case err = <-srv.served:
		logger.Error("server stopped", "err", err)
	}
	return errors.Join(err, srv.shutdown())
}

// printBanner says how to call the server: with the development token when
// there is one (shown when it was generated, named when it came from the
// environment), else with an issued token.
func printBanner(w io.Writer, srv *localServer) {
	env := srv.cfg.Auth.DevTokenEnv
	shown := "$" + env
	switch {
	case env == "":
		n := len(srv.cfg.Auth.Tokens)
		fmt.Fprintf(w, "dev token: off ([auth] dev_token_env = \"\"); callers use the %s of [[auth.tokens]]\n", count(n, "issued token", "issued tokens"))
		shown = "$TOKEN"
	case srv.generated:
		shown = srv.token
		fmt.Fprintf(w, "dev token (tenant dev): %s\n  set %s to choose your own\n", srv.token, env)
	default:
		fmt.Fprintf(w, "dev token (tenant dev): from $%s\n", env)
	}
	fmt.Fprintf(w, "try:\n  curl -s -X POST %s/v1/jobs -H \"Authorization: Bearer %s\" -d '{\"query\":\"what is bubblewrap\",\"seed_urls\":[\"https://github.com/containers/bubblewrap\"]}'\n", srv.url, shown)
	switch {
	case env == "":
		fmt.Fprintln(w, "  or: SANDSTEP_TOKEN=$TOKEN bin/sandstep research \"what is bubblewrap\"")
	case srv.generated:
		// The CLI reads SANDSTEP_DEV_TOKEN, or SANDSTEP_TOKEN whatever
		// variable the server reads.
		cliEnv := envToken
		if env == envDevToken {
			cliEnv = envDevToken
		}
		fmt.Fprintf(w, "  or: %s=%s bin/sandstep research \"what is bubblewrap\"\n", cliEnv, srv.token)
	case env == envDevToken:
		fmt.Fprintln(w, "  or: bin/sandstep research \"what is bubblewrap\"")
	default:
		fmt.Fprintf(w, "  or: %s=$%s bin/sandstep research \"what is bubblewrap\"\n", envToken, env)
	}
	fmt.Fprintf(w, "web console: %s/ (sign in with the token; the API's description is %s/v1/openapi.json)\n", srv.url, srv.url)
	if srv.url != "http://"+dialAddr(srv.cfg.Server.Addr) {
		// Client commands look for the server at [server] addr.
		fmt.Fprintf(w, "client commands: export %s=%s (this server does not listen on [server] addr)\n", envServer, srv.url)
	}
}

// localServer is the local stack behind an HTTP server.
type localServer struct {
	cfg       *config.Config
	stack     *localstack.Stack
	http      *http.Server
	url       string
	token     string
	generated bool
	served    chan error
}

// startServer loads the config, starts the local stack and serves its API
// on addr (default: the config's).
func startServer(ctx context.Context, cfgPath, addr, dataDir string, logger *slog.Logger) (*localServer, error) {
	cfg, err := config.Load(cfgPath)
	if err != nil {
		return nil, err
	}
	if addr == "" {
		addr = cfg.Server.Addr
	} else if err := config.CheckListenAddr(addr, cfg.Server.AllowNonLoopback); err != nil {
		return nil, fmt.Errorf("--addr: %w", err)
	}
	if dataDir != "" {
		if dataDir, err = absDir(dataDir); err != nil {
			return nil, err
		}
		// A provider's state follows the data dir unless its settings set
		// it apart (Config.ProviderDataDir).
		cfg.Server.DataDir = dataDir
	}
	if err := os.MkdirAll(cfg.Server.DataDir, 0o755); err != nil {
		return nil, fmt.Errorf("data dir: %w", err)
	}
	s := &localServer{cfg: cfg, served: make(chan error, 1)}
	// dev_token_env = "" turns the development token off: none is read
	// and none is made up.
	if cfg.Auth.DevTokenEnv != "" {
		s.token = os.Getenv(cfg.Auth.DevTokenEnv)
		if s.token == "" {
			s.token, s.generated = randomToken(), true
		}
	}
	// A server nobody can call is refused before anything starts.
	if _, err := api.NewAuthenticator(cfg.Auth, os.Getenv, s.token); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen: %w", err)
	}
	startCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	s.stack, err = localstack.Start(startCtx, localstack.Options{Config: cfg, DevToken: s.token, Logger: logger})
	cancel()
	if err != nil {
		ln.Close()
		return nil, err
	}
	s.http = api.NewServer(s.stack.Handler, cfg.Server, logger)
	go func() { s.served <- s.http.Serve(ln) }()
	s.url = "http://" + ln.Addr().String()
	return s, nil
}

// shutdown drains: it stops taking requests, then stops executions (their
// cleanups terminate sandboxes), the plugin and DynamoDB Local.
func (s *localServer) shutdown() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	err := s.http.Shutdown(ctx)
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return errors.Join(err, s.stack.Shutdown(ctx))
}

func randomToken() string {
	b := make([]byte, 24)
	rand.Read(b)
	return "sdt_" + hex.EncodeToString(b)
}
