package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/sandstep/sandstep/config"
	"github.com/sandstep/sandstep/internal/service/providerhost"
	"github.com/sandstep/sandstep/providers/conformance"
)

func runConformance(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("conformance", stdout, stderr)
	cfgPath := fs.String("config", config.DefaultPath(), "config file (env SANDSTEP_CONFIG)")
	name := fs.String("provider", "", "provider to test (default: the one config.toml selects)")
	short := fs.Bool("short", false, "skip the heavy cases (tens of megabytes, 20 sandboxes at once)")
	core := fs.Bool("core", false, "run only the core cases, which check the protocol itself")
	only := fs.String("run", "", "comma-separated case name patterns to run (e.g. 'exec-*,files-*')")
	skip := fs.String("skip", "", "comma-separated case name patterns to skip")
	parallel := fs.Int("parallel", 2, "cases run at once (heavy cases always run alone)")
	scale := fs.Float64("timeout-scale", 1, "multiply every timeout (slow remote backends want more)")
	hostReachable := fs.Bool("host-reachable", false, "sandboxes run on this machine: run the network cases against a fixture on 127.0.0.1 that is added to allow_private (default true for local)")
	verbose := fs.Bool("v", false, "print the log lines of passing cases too")
	if _, err := positional(fs, args); err != nil {
		return err
	}
	cfg, err := config.Load(*cfgPath)
	if err != nil {
		return err
	}
	if *name == "" {
		*name = cfg.Provider.Name
	}
	reach := *hostReachable
	if !flagSet(fs.FlagSet, "host-reachable") {
		reach = *name == "local"
	}
	var fx *conformance.Fixture
	if reach {
		if fx, err = conformance.StartFixture(); err != nil {
			return fmt.Errorf("conformance fixture: %w", err)
		}
		defer fx.Close()
		cfg.Sandbox.AllowPrivate = append(cfg.Sandbox.AllowPrivate, fx.Listed)
		if *name == "local" {
			if err := cfg.SetProviderSetting("local", "dns_servers", []string{fx.DNS}); err != nil {
				return err
			}
		}
	}
	p, err := providerhost.Open(ctx, cfg, *name, quietLogger(stderr))
	if err != nil {
		return err
	}
	defer p.Close()
	sum := conformance.RunAll(ctx, p, conformance.Options{
		Short:        *short,
		Core:         *core,
		Only:         splitList(*only),
		Skip:         splitList(*skip),
		Parallel:     *parallel,
		TimeoutScale: *scale,
		Fixture:      fx,
		FixtureDNS:   fx != nil && *name == "local",
		Verbose:      *verbose,
	}, stdout)
	fmt.Fprintf(stdout, "%d passed, %d failed, %d skipped\n", sum.Passed, sum.Failed, sum.Skipped)
	if !sum.OK() {
		return fmt.Errorf("provider %q failed %d conformance case(s)", *name, sum.Failed)
	}
	return nil
}

func splitList(s string) []string {
	var out []string
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			out = append(out, v)
		}
	}
	return out
}

// flagSet reports whether the flag was given on the command line.
func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}
