// Command sandstep-crawler is the deep-research crawler that runs inside a
// sandbox. It reads the sources and limits from --input, prints
// __PROGRESS__ lines on stdout (and appends them to --progress-file), and
// writes the pages it found to --output atomically.
//
// Build it static (CGO_ENABLED=0) so that it runs in any sandbox image.
//
// Exit status: 0 when the output was written, including partial results after
// the duration limit or SIGTERM; 1 when the input is invalid or the output
// cannot be written; 2 for a usage error.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/sandstep/sandstep/internal/service/crawler"
	"github.com/sandstep/sandstep/internal/service/logging"
	"github.com/sandstep/sandstep/internal/service/version"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("sandstep-crawler", flag.ContinueOnError)
	fs.SetOutput(stderr)
	input := fs.String("input", "", "path of input.json (sources, limits, render mode)")
	output := fs.String("output", "", "path of output.json, written atomically")
	progressFile := fs.String("progress-file", "", "also append progress lines to this file")
	showVersion := fs.Bool("version", false, "print the version and exit")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *showVersion {
		fmt.Fprintln(stdout, version.Version)
		return 0
	}
	if *input == "" || *output == "" || fs.NArg() > 0 {
		fmt.Fprintln(stderr, "usage: sandstep-crawler --input input.json --output output.json [--progress-file progress.log]")
		return 2
	}
	log := slog.New(logging.NewHandler(stderr, logging.Options{}))

	writers := []io.Writer{stdout}
	if *progressFile != "" {
		f, err := os.OpenFile(*progressFile, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
		if err != nil {
			log.Error("open progress file", "err", err)
			return 1
		}
		defer f.Close()
		writers = append(writers, f)
	}
	progress := crawler.NewProgressWriter(writers...)
	fail := func(msg string, err error) int {
		log.Error(msg, "err", err)
		progress.Report(crawler.Progress{Stage: crawler.StageCrawl, Status: crawler.StatusError, Message: msg + ": " + err.Error()})
		return 1
	}

	f, err := os.Open(*input)
	if err != nil {
		return fail("read input", err)
	}
	in, err := crawler.ReadInput(f)
	f.Close()
	if err != nil {
		return fail("read input", err)
	}
	out, err := crawler.Crawl(ctx, in, progress.Report)
	if err != nil { // only an invalid input fails a crawl
		return fail("invalid input", err)
	}
	if err := crawler.WriteOutput(*output, out); err != nil {
		return fail("write output", err)
	}
	log.Info("crawl done", "pages", out.Stats.Pages, "skipped", len(out.Skipped), "duration_ms", out.Stats.DurationMS, "stopped", out.Stats.Stopped, "mode", out.Stats.Mode)
	return 0
}
