package main

import (
	"bufio"
	"bytes"
	"debug/elf"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandstep/sandstep/internal/service/crawler"
	"github.com/sandstep/sandstep/internal/testkit/fixturesite"
	"github.com/sandstep/sandstep/internal/testkit/testbin"
)

var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "sandstep-crawler-test-")
	if err != nil {
		panic(err)
	}
	// Built the way the sandbox gets it: static, no cgo.
	if _, err := testbin.Build(dir, testbin.Crawler); err != nil {
		os.RemoveAll(dir)
		panic(err)
	}
	binary = filepath.Join(dir, testbin.Crawler)
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func writeInput(t *testing.T, in crawler.Input) (input, output string) {
	t.Helper()
	dir := t.TempDir()
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	input, output = filepath.Join(dir, "input.json"), filepath.Join(dir, "output.json")
	if err := os.WriteFile(input, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return input, output
}

func readOutput(t *testing.T, path string) crawler.Output {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out crawler.Output
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&out); err != nil {
		t.Fatalf("output.json: %v\n%s", err, b)
	}
	return out
}

func parseLines(t *testing.T, stdout string) []crawler.Progress {
	t.Helper()
	var lines []crawler.Progress
	for line := range strings.Lines(stdout) {
		p, ok, err := crawler.ParseProgress(line)
		if !ok || err != nil {
			t.Fatalf("stdout line %q is not a progress line (%v)", line, err)
		}
		lines = append(lines, p)
	}
	return lines
}

func TestBinaryIsStatic(t *testing.T) {
	f, err := elf.Open(binary)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if s := f.Section(".interp"); s != nil {
		t.Error("the binary has an ELF interpreter: it is dynamically linked")
	}
	if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
		t.Errorf("the binary links %v", libs)
	}
}

func TestBinaryEndToEnd(t *testing.T) {
	site := fixturesite.Start(t, fixturesite.Options{})
	alpha, beta := site.Hosts[0], site.Hosts[1]
	input, output := writeInput(t, crawler.Input{
		AllowPrivate: site.AllowPrivate(),
		Sources: []crawler.Source{
			{N: 1, URL: alpha.Page("/"), Title: "Alpha", Snippet: "the alpha site"},
			{N: 2, URL: beta.Page("/a")},
			{N: 3, URL: alpha.Page(fixturesite.PathPDF)},
		},
		Limits: crawler.Limits{MaxPages: 8, MaxDepth: 2, MaxLinksPerPage: 3, MaxPagesPerHost: 4},
		Render: crawler.RenderNever,
	})
	progressFile := filepath.Join(t.TempDir(), "progress.log")
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(t.Context(), binary, "--input", input, "--output", output, "--progress-file", progressFile)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("run: %v\nstderr: %s", err, stderr.String())
	}

	lines := parseLines(t, stdout.String())
	if logged, _ := os.ReadFile(progressFile); string(logged) != stdout.String() {
		t.Errorf("progress file differs from stdout:\n%s\n---\n%s", logged, stdout.String())
	}
	if last := lines[len(lines)-1]; last.Stage != crawler.StageCrawl || last.Status != crawler.StatusComplete || last.Current != 8 {
		t.Errorf("last progress line = %+v", last)
	}

	out := readOutput(t, output)
	// alpha holds 4: its index, the PDF and the index's first two new
	// links; beta's /a adds its first three new links.
	var got []string
	for _, p := range out.Pages {
		got = append(got, p.URL)
	}
	want := []string{alpha.Page("/"), beta.Page("/a"), alpha.Page("/about"), alpha.Page("/a"), beta.Page("/"), beta.Page("/about"), beta.Page("/a1")}
	if !slices.Equal(got, want) {
		t.Errorf("pages:\n got %q\nwant %q", got, want)
	}
	if len(out.Skipped) != 1 || out.Skipped[0].Reason != "unreadable" || out.Skipped[0].URL != alpha.Page(fixturesite.PathPDF) {
		t.Errorf("skipped = %+v", out.Skipped)
	}
	if out.Stats.Pages != 7 || out.Stats.Mode != "http" || out.Stats.Stopped != crawler.StoppedDone {
		t.Errorf("stats = %+v", out.Stats)
	}
	if p := out.Pages[0]; p.N != 1 || !strings.Contains(p.Content, alpha.Marker("/")) || p.Title == "" {
		t.Errorf("first page = %+v", p)
	}
}

func TestBinarySIGTERMWritesPartialResults(t *testing.T) {
	site := fixturesite.Start(t, fixturesite.Options{SlowLatency: 5 * time.Minute})
	alpha := site.Hosts[0]
	input, output := writeInput(t, crawler.Input{
		AllowPrivate: site.AllowPrivate(),
		Sources:      []crawler.Source{{N: 1, URL: alpha.Page("/")}, {N: 2, URL: alpha.Page(fixturesite.PathSlow)}},
		Limits:       crawler.Limits{Concurrency: 2, PageTimeoutMS: 600000},
		Render:       crawler.RenderNever,
	})
	cmd := exec.Command(binary, "--input", input, "--output", output)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })

	// Wait until the fast page is done; the slow one is then in flight.
	sc := bufio.NewScanner(stdout)
	var seen []string
	for sc.Scan() {
		seen = append(seen, sc.Text())
		if p, ok, _ := crawler.ParseProgress(sc.Text()); ok && p.URL == alpha.Page("/") {
			break
		}
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	for sc.Scan() {
		seen = append(seen, sc.Text())
	}
	_, _ = io.Copy(io.Discard, stdout)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("exit after SIGTERM: %v\nstdout: %q\nstderr: %s", err, seen, stderr.String())
	}
	out := readOutput(t, output)
	if out.Stats.Stopped != crawler.StoppedSignal || len(out.Pages) != 1 || out.Pages[0].URL != alpha.Page("/") {
		t.Errorf("output after SIGTERM: stats %+v pages %d", out.Stats, len(out.Pages))
	}
	if len(out.Skipped) != 1 || out.Skipped[0].URL != alpha.Page(fixturesite.PathSlow) {
		t.Errorf("skipped = %+v", out.Skipped)
	}
}

func TestBinaryErrors(t *testing.T) {
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(binary, "--input", "x.json")
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	var exit *exec.ExitError
	if err := cmd.Run(); !errors.As(err, &exit) || exit.ExitCode() != 2 {
		t.Errorf("without --output: %v, want exit 2", err)
	}

	dir := t.TempDir()
	input, output := filepath.Join(dir, "input.json"), filepath.Join(dir, "output.json")
	if err := os.WriteFile(input, []byte(`{"sources":[],"render":"sometimes"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	stdout.Reset()
	cmd = exec.Command(binary, "--input", input, "--output", output)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Errorf("invalid input: %v, want exit 1", err)
	}
	lines := parseLines(t, stdout.String())
	if len(lines) != 1 || lines[0].Status != crawler.StatusError || !strings.Contains(lines[0].Message, "render") {
		t.Errorf("progress lines = %+v", lines)
	}
	if _, err := os.Stat(output); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("output written for an invalid input: %v", err)
	}
}

func TestBinaryRendersWithChromium(t *testing.T) {
	if crawler.FindBrowser("") == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("no chromium in PATH (install the Debian package chromium)")
		}
		t.Skip("no chromium in PATH (apt-get install chromium)")
	}
	site := fixturesite.Start(t, fixturesite.Options{})
	alpha := site.Hosts[0]
	input, output := writeInput(t, crawler.Input{
		AllowPrivate: site.AllowPrivate(),
		Sources:      []crawler.Source{{N: 1, URL: alpha.Page(fixturesite.PathJS)}},
		Limits:       crawler.Limits{PageTimeoutMS: 60000},
	})
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(t.Context(), binary, "--input", input, "--output", output)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("run: %v\nstderr: %s", err, stderr.String())
	}
	out := readOutput(t, output)
	if len(out.Pages) != 1 || out.Pages[0].Mode != "browser" || !strings.Contains(out.Pages[0].Content, fixturesite.JSText) {
		t.Errorf("pages = %+v\nstdout: %s", out.Pages, stdout.String())
	}
}
