package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sandstep/sandstep/config"
	"github.com/sandstep/sandstep/internal/service/logging"
	"github.com/sandstep/sandstep/internal/service/providerhost"
	"github.com/sandstep/sandstep/providers"
	"github.com/sandstep/sandstep/providers/plugin"
)

func runPlugins(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("plugins", stdout, stderr)
	cfgPath := fs.String("config", config.DefaultPath(), "config file (env SANDSTEP_CONFIG)")
	if _, err := positional(fs, args); err != nil {
		return err
	}
	cfg, err := config.Load(*cfgPath)
	if err != nil {
		return err
	}
	names, err := findPlugins(cfg.Provider.PluginDir)
	if err != nil {
		return err
	}
	logger := quietLogger(stderr)
	// The id this stack labels everything with at the provider: two stacks
	// sharing one provider need different ones.
	fmt.Fprintf(stdout, "deployment: %s\n", cfg.Provider.Deployment)
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PROVIDER\tVERSION\tAPI\tCAPABILITIES")
	var activeErr error
	var plainSecrets []string
	for _, name := range names {
		marker := ""
		if name == cfg.Provider.Name {
			marker = " (active)"
		}
		info, err := pluginInfo(ctx, cfg, name, logger)
		if err != nil {
			fmt.Fprintf(tw, "%s%s\t-\t-\terror: %s\n", name, marker, strings.ReplaceAll(err.Error(), "\n", "; "))
			if name == cfg.Provider.Name {
				activeErr = err
			}
			continue
		}
		fmt.Fprintf(tw, "%s%s\t%s\tv%d\t%s\n", name, marker, info.Version, info.APIVersion, capabilities(info.Capabilities))
		if !info.Capabilities.HostScopedSecrets {
			plainSecrets = append(plainSecrets, name)
		}
	}
	tw.Flush()
	if len(plainSecrets) > 0 {
		fmt.Fprintf(stdout, "no host-scoped secrets: %s (a secret's hosts do not bind it there: its value is a plain environment variable in the sandbox)\n", strings.Join(plainSecrets, ", "))
	}
	// The configured provider must be runnable: say so in one line if not,
	// and pass on what it found wrong with its settings.
	if !contains(names, cfg.Provider.Name) {
		return &plugin.BinaryNotFoundError{Provider: cfg.Provider.Name, Path: absPath(cfg.PluginPath(cfg.Provider.Name))}
	}
	return activeErr
}

func pluginInfo(ctx context.Context, cfg *config.Config, name string, logger *slog.Logger) (providers.Info, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	c, err := providerhost.Open(ctx, cfg, name, logger)
	if err != nil {
		return providers.Info{}, err
	}
	defer c.Close()
	return c.Info(ctx)
}

// findPlugins lists the provider names whose binaries are in dir.
func findPlugins(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("plugin directory: %w", err)
	}
	var names []string
	for _, e := range entries {
		if n, ok := strings.CutPrefix(e.Name(), plugin.BinaryPrefix); ok && !e.IsDir() && n != "" {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	return names, nil
}

func capabilities(c providers.Capabilities) string {
	var out []string
	for _, f := range []struct {
		on   bool
		name string
	}{
		{c.Snapshots, "snapshots"}, {c.Volumes, "volumes"}, {c.NamedSandboxes, "named"},
		{c.ListByLabels, "list"}, {c.ExecStreaming, "exec-streaming"}, {c.FileAPI, "files"},
		{c.PublicURL, "public-url"}, {c.HostScopedSecrets, "host-scoped-secrets"}, {c.ListSnapshots, "list-snapshots"},
	} {
		if f.on {
			out = append(out, f.name)
		}
	}
	modes := make([]string, len(c.NetworkModes))
	for i, m := range c.NetworkModes {
		modes[i] = string(m)
	}
	if len(modes) > 0 {
		out = append(out, "network="+strings.Join(modes, "|"))
	}
	if c.MaxLifetime > 0 {
		out = append(out, "max-lifetime="+c.MaxLifetime.String())
	}
	if len(c.Regions) > 0 {
		out = append(out, "regions="+strings.Join(c.Regions, "|"))
	}
	if l := c.Limits; l.Cgroups != "" || l.Volumes != "" || len(l.Enforced) > 0 {
		// limits=cgroup-v1:memory|processes|cpu|scratch|volume_capacity,volumes=ext4-image
		enforced := strings.Join(l.Enforced, "|")
		if enforced == "" {
			enforced = "none"
		}
		if l.Cgroups != "" {
			enforced = "cgroup-" + l.Cgroups + ":" + enforced
		}
		out = append(out, "limits="+enforced)
		if l.Volumes != "" {
			out = append(out, "volumes="+l.Volumes)
		}
	}
	return strings.Join(out, ",")
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

func absPath(p string) string {
	if a, err := filepath.Abs(p); err == nil {
		return a
	}
	return p
}

// quietLogger relays plugin logs at warning level and above, so that listing
// plugins prints a table, not their start-up chatter.
func quietLogger(w io.Writer) *slog.Logger {
	return slog.New(logging.NewHandler(w, logging.Options{Level: slog.LevelWarn, Text: true}))
}

func absDir(p string) (string, error) {
	a, err := filepath.Abs(p)
	if err != nil {
		return "", fmt.Errorf("%s: %w", p, err)
	}
	return a, nil
}
