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
	"path/filepath"
	"time"

	"github.com/sandstep/sandstep/config"
	"github.com/sandstep/sandstep/internal/localstack"
)

func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("serve", stderr)
	cfgPath := fs.String("config", config.DefaultPath(), "config file (env SANDSTEP_CONFIG)")
	addr := fs.String("addr", "", "listen address (default: [server] addr, 127.0.0.1:8080)")
	dataDir := fs.String("data-dir", "", "folder for DynamoDB Local's data and the local provider's state (default: [server] data_dir)")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg, err := config.Load(*cfgPath)
	if err != nil {
		return err
	}
	if *addr == "" {
		*addr = cfg.Server.Addr
	}
	if *dataDir != "" {
		if *dataDir, err = absDir(*dataDir); err != nil {
			return err
		}
		// The local provider's state follows the data dir unless set apart.
		if cfg.Provider.Local.StateDir == filepath.Join(cfg.Server.DataDir, "local") {
			cfg.Provider.Local.StateDir = filepath.Join(*dataDir, "local")
		}
		cfg.Server.DataDir = *dataDir
	}
	if err := os.MkdirAll(cfg.Server.DataDir, 0o755); err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	logger := newLogger(stderr, *logLevel)
	slog.SetDefault(logger)

	token := os.Getenv(cfg.Auth.DevTokenEnv)
	generated := false
	if token == "" {
		token = randomToken()
		generated = true
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	startCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	stack, err := localstack.Start(startCtx, localstack.Options{Config: cfg, DevToken: token, Logger: logger})
	cancel()
	if err != nil {
		ln.Close()
		return err
	}
	srv := &http.Server{Handler: stack.Handler, ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()

	url := "http://" + ln.Addr().String()
	fmt.Fprintf(stdout, "sandstep is serving on %s (provider %q, data in %s)\n", url, cfg.Provider.Name, cfg.Server.DataDir)
	if generated {
		fmt.Fprintf(stdout, "dev token (tenant dev): %s\n  set %s to choose your own\n", token, cfg.Auth.DevTokenEnv)
	} else {
		fmt.Fprintf(stdout, "dev token (tenant dev): from $%s\n", cfg.Auth.DevTokenEnv)
	}
	fmt.Fprintf(stdout, "try:\n  curl -s -X POST %s/v1/jobs -H \"Authorization: Bearer %s\" -d '{\"query\":\"what is bubblewrap\",\"seed_urls\":[\"https://github.com/containers/bubblewrap\"]}'\n", url, shownToken(token, generated, cfg.Auth.DevTokenEnv))

	select {
	case <-ctx.Done():
		fmt.Fprintln(stdout, "shutting down: stopping jobs and sandboxes")
	case err = <-served:
		logger.Error("server stopped", "err", err)
	}
	// Drain: stop taking requests, then stop executions (their cleanups
	// terminate sandboxes), the plugin and DynamoDB Local.
	shutCtx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	serr := srv.Shutdown(shutCtx)
	if errors.Is(serr, http.ErrServerClosed) {
		serr = nil
	}
	return errors.Join(err, serr, stack.Shutdown(shutCtx))
}

func shownToken(token string, generated bool, env string) string {
	if generated {
		return token
	}
	return "$" + env
}

func randomToken() string {
	b := make([]byte, 24)
	rand.Read(b)
	return "sdt_" + hex.EncodeToString(b)
}

func newLogger(w io.Writer, level string) *slog.Logger {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		l = slog.LevelInfo
	}
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: l}))
}
