package main

// The commands that talk to a running sandstep server over its HTTP API:
// submit, status, events, cancel and report.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	iofs "io/fs"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/sandstep/sandstep/config"
	"github.com/sandstep/sandstep/internal/service/store"
	"github.com/sandstep/sandstep/internal/service/version"
)

const (
	defaultServer = "http://127.0.0.1:8080"
	envServer     = "SANDSTEP_URL"
	envToken      = "SANDSTEP_TOKEN"
	// envDevToken is the variable `sandstep serve` reads the dev token from
	// (config [auth] dev_token_env's default), so that one exported
	// variable serves both the server and the client on a developer's
	// machine.
	envDevToken = "SANDSTEP_DEV_TOKEN"

	// requestTimeout bounds one request that is not a stream.
	requestTimeout = 60 * time.Second
	// maxErrorBody bounds how much of an error answer is read.
	maxErrorBody = 64 << 10
)

// Following a job's events. Variables so that tests can shorten them.
var (
	// followIdle: the server sends a keep-alive comment every 15 s, so a
	// stream silent for this long is a dead connection, reconnected.
	followIdle = 60 * time.Second
	// maxReconnects is how many reconnections in a row that bring nothing
	// (no event, no keep-alive) are tried before giving up.
	maxReconnects = 5
	// reconnectDelay is the first wait before reconnecting when the server
	// gave no retry hint; each fruitless attempt doubles the wait, up to
	// maxReconnectDelay.
	reconnectDelay    = time.Second
	maxReconnectDelay = 30 * time.Second
	// pollInterval paces following a server that does not stream (the
	// API Lambda behind API Gateway answers JSON pages only).
	pollInterval = 2 * time.Second
)

// clientFlags are the flags every client command takes.
type clientFlags struct {
	server, token, config *string
	json                  *bool
}

func addClientFlags(fs *flags) clientFlags {
	return clientFlags{
		// The defaults are resolved after parsing: the server's from the
		// config only when needed, and the token's never shown, as -h must
		// not print a token.
		server: fs.String("server", "", "URL of the sandstep server (default: env "+envServer+", else http://[server] addr of the config)"),
		token:  fs.String("token", "", "API token (default: env "+envToken+", else "+envDevToken+")"),
		config: fs.String("config", config.DefaultPath(), "config file whose [server] addr is the server when neither --server nor "+envServer+" is set (env "+config.EnvPath+")"),
		json:   fs.Bool("json", false, "print the API's JSON answer, for scripts"),
	}
}

// serverURL is where the client commands find the server: --server, else
// SANDSTEP_URL, else the address `sandstep serve` listens on by the same
// config, else the built-in default when there is no config file at all.
func (f clientFlags) serverURL() (string, error) {
	if *f.server != "" {
		return *f.server, nil
	}
	if v := os.Getenv(envServer); v != "" {
		return v, nil
	}
	cfg, err := config.Load(*f.config)
	if errors.Is(err, iofs.ErrNotExist) {
		return defaultServer, nil
	}
	if err != nil {
		return "", fmt.Errorf("finding the server in %s (or pass --server, or set %s): %w", *f.config, envServer, err)
	}
	return "http://" + dialAddr(cfg.Server.Addr), nil
}

// dialAddr turns a listen address into one to connect to: a server
// listening on every interface is reached on loopback.
func dialAddr(listen string) string {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return listen
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		if ip != nil && ip.To4() == nil {
			host = "::1"
		} else {
			host = "127.0.0.1"
		}
	}
	return net.JoinHostPort(host, port)
}

func (f clientFlags) client() (*client, error) {
	server, err := f.serverURL()
	if err != nil {
		return nil, err
	}
	raw := strings.TrimRight(strings.TrimSpace(server), "/")
	if !strings.Contains(raw, "://") {
		raw = "http://" + raw
	}
	base, err := url.Parse(raw)
	if err != nil || (base.Scheme != "http" && base.Scheme != "https") || base.Host == "" {
		return nil, fmt.Errorf("--server %q is not an http or https URL", server)
	}
	token := *f.token
	if token == "" {
		token = os.Getenv(envToken)
	}
	if token == "" {
		token = os.Getenv(envDevToken)
	}
	if token == "" {
		return nil, fmt.Errorf("no API token: pass --token or set %s (or %s, the dev token `sandstep serve` prints)", envToken, envDevToken)
	}
	return &client{base: base, token: token, hc: &http.Client{}}, nil
}

// writeJSON prints an API answer for scripts: one line, as the server sent
// it.
func writeJSON(w io.Writer, raw []byte) error {
	raw = bytes.TrimRight(raw, "\n")
	_, err := fmt.Fprintf(w, "%s\n", raw)
	return err
}

// client calls one sandstep server as one tenant.
type client struct {
	base  *url.URL
	token string
	hc    *http.Client
}

// shown is the server's URL as it may be printed.
func (c *client) shown() string { return c.base.Redacted() }

func (c *client) request(ctx context.Context, method, path string, query url.Values, body io.Reader) (*http.Request, error) {
	u := *c.base
	u.Path = strings.TrimRight(u.Path, "/") + path
	u.RawPath = ""
	u.RawQuery = query.Encode()
	req, err := http.NewRequestWithContext(ctx, method, u.String(), body)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	req.Header.Set("User-Agent", "sandstep/"+version.Version)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	return req, nil
}

// send sends req and returns the response when it succeeded; an error
// answer becomes an *apiError, a failed connection a clear error.
func (c *client) send(req *http.Request) (*http.Response, error) {
	res, err := c.hc.Do(req)
	if err != nil {
		return nil, c.transportError(err)
	}
	if res.StatusCode >= 300 {
		defer res.Body.Close()
		return nil, c.readError(res)
	}
	return res, nil
}

// call sends one JSON request and decodes the answer into out (when not
// nil); it returns the answer's body and status.
func (c *client) call(ctx context.Context, method, path string, query url.Values, in, out any) ([]byte, int, error) {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return nil, 0, err
		}
		body = bytes.NewReader(b)
	}
	req, err := c.request(ctx, method, path, query, body)
	if err != nil {
		return nil, 0, err
	}
	req.Header.Set("Accept", "application/json")
	res, err := c.send(req)
	if err != nil {
		return nil, 0, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		return nil, 0, c.transportError(err)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			return nil, 0, fmt.Errorf("the server at %s answered %s %s with what is not the API's JSON: %w", c.shown(), method, path, err)
		}
	}
	return b, res.StatusCode, nil
}

// serverDownError: nothing listens at the server's address.
type serverDownError struct {
	url string
	err error
}

func (e *serverDownError) Error() string {
	return fmt.Sprintf("no sandstep server is running at %s (connection refused): start one with `sandstep serve` or `make run`, or point --server (env %s) at one", e.url, envServer)
}

func (e *serverDownError) Unwrap() error { return e.err }

func (c *client) transportError(err error) error {
	if errors.Is(err, syscall.ECONNREFUSED) {
		return &serverDownError{url: c.shown(), err: err}
	}
	// url.Error holds the URL without its password and no header: the
	// token is not in it.
	return fmt.Errorf("talking to the sandstep server at %s: %w", c.shown(), err)
}

// apiError is an error answer of the API: {"error":{code,message,field,...}}.
type apiError struct {
	Status    int    `json:"-"`
	Code      string `json:"code"`
	Message   string `json:"message"`
	Field     string `json:"field"`
	JobID     string `json:"job_id"`
	JobStatus string `json:"status"`
}

func (e *apiError) Error() string {
	s := e.Code + ": " + e.Message
	if e.Field != "" {
		s += " (" + e.Field + ")"
	}
	return s
}

// readError reads an error answer. One that is not the API's (a proxy's
// page) is reported by its status and the start of its text.
func (c *client) readError(res *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(res.Body, maxErrorBody))
	var body struct {
		Error *apiError `json:"error"`
	}
	var e *apiError
	if json.Unmarshal(b, &body) == nil && body.Error != nil && body.Error.Code != "" {
		e = body.Error
	} else {
		text := strings.Join(strings.Fields(string(b)), " ")
		if len(text) > 200 {
			text = text[:200] + "..."
		}
		if text == "" {
			text = http.StatusText(res.StatusCode)
		}
		e = &apiError{Code: fmt.Sprintf("HTTP %d", res.StatusCode), Message: text}
	}
	e.Status = res.StatusCode
	// A server that echoes the token must not make the CLI print it.
	e.Message = strings.ReplaceAll(e.Message, c.token, "[token]")
	return e
}

func jobPath(id string, sub ...string) string {
	p := "/v1/jobs/" + url.PathEscape(id)
	for _, s := range sub {
		p += "/" + s
	}
	return p
}

// stringList is a flag that may be repeated.
type stringList []string

func (l *stringList) String() string     { return strings.Join(*l, ",") }
func (l *stringList) Set(v string) error { *l = append(*l, v); return nil }

type submitRequest struct {
	Query        string   `json:"query"`
	Mode         string   `json:"mode,omitempty"`
	Optimization string   `json:"optimization,omitempty"`
	SeedURLs     []string `json:"seed_urls,omitempty"`
	JobID        string   `json:"job_id,omitempty"`
}

type submitAnswer struct {
	JobID  string `json:"job_id"`
	Status string `json:"status"`
}

func runSubmit(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("submit", stdout, stderr)
	var urls stringList
	fs.Var(&urls, "url", "a seed URL to crawl; repeat for several")
	mode := fs.String("mode", "", "light (depth 1: the sources only) or max (depth 2: the sources and the pages they link to) (the server's default: light)")
	opt := fs.String("optimization", "", "speed, balanced or quality (the server's default: balanced)")
	jobID := fs.String("job-id", "", "the job's id; submitting the same request under it again finds the job instead of starting another")
	wait := fs.Bool("wait", false, "follow the job's events until it ends; exit 1 unless it succeeded")
	cf := addClientFlags(fs)
	pos, err := positional(fs, args, "QUERY")
	if err != nil {
		return err
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	var ans submitAnswer
	raw, code, err := c.call(ctx, http.MethodPost, "/v1/jobs", nil,
		submitRequest{Query: pos[0], Mode: *mode, Optimization: *opt, SeedURLs: urls, JobID: *jobID}, &ans)
	if err != nil {
		return err
	}
	if *cf.json {
		writeJSON(stdout, raw)
	} else {
		fmt.Fprintln(stdout, ans.JobID)
	}
	if code == http.StatusOK {
		fmt.Fprintf(stderr, "job %s already existed for this request (%s)\n", ans.JobID, ans.Status)
	}
	if !*wait {
		return nil
	}
	final, err := c.follow(ctx, ans.JobID, 0, eventPrinter{stdout, *cf.json}, stderr)
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("stopped waiting; job %s goes on (sandstep events %s --follow): %w", ans.JobID, ans.JobID, err)
		}
		return err
	}
	if *cf.json {
		if raw, _, err := c.call(ctx, http.MethodGet, jobPath(ans.JobID), nil, nil, nil); err == nil {
			writeJSON(stdout, raw)
		}
	} else {
		fmt.Fprintf(stdout, "job %s %s\n", ans.JobID, final)
	}
	return outcome(ctx, c, ans.JobID, final)
}

// outcome is nil for a job that succeeded, else an error that says why it
// did not.
func outcome(ctx context.Context, c *client, id, final string) error {
	switch store.Status(final) {
	case store.StatusSucceeded:
		return nil
	case store.StatusCancelled:
		return fmt.Errorf("job %s was cancelled", id)
	}
	var st jobStatus
	if _, _, err := c.call(ctx, http.MethodGet, jobPath(id), nil, nil, &st); err == nil && st.Error != nil && *st.Error != "" {
		return fmt.Errorf("job %s %s: %s", id, final, *st.Error)
	}
	return fmt.Errorf("job %s %s", id, final)
}

type jobStatus struct {
	JobID  string  `json:"job_id"`
	Status string  `json:"status"`
	Phase  *string `json:"phase"`
	Steps  []struct {
		ID      string `json:"id"`
		Label   string `json:"label"`
		Status  string `json:"status"`
		Current int    `json:"current"`
		Total   int    `json:"total"`
	} `json:"steps"`
	CreatedAt       string   `json:"created_at"`
	UpdatedAt       string   `json:"updated_at"`
	Error           *string  `json:"error"`
	Fallbacks       []string `json:"fallbacks"`
	CancelRequested bool     `json:"cancel_requested"`
}

func runStatus(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("status", stdout, stderr)
	cf := addClientFlags(fs)
	pos, err := positional(fs, args, "ID")
	if err != nil {
		return err
	}
	id := pos[0]
	c, err := cf.client()
	if err != nil {
		return err
	}
	var st jobStatus
	raw, _, err := c.call(ctx, http.MethodGet, jobPath(id), nil, nil, &st)
	if err != nil {
		return err
	}
	if *cf.json {
		return writeJSON(stdout, raw)
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	status := st.Status
	if st.CancelRequested && !store.Status(status).Terminal() {
		status += " (cancel requested)"
	}
	fmt.Fprintf(tw, "job\t%s\n", st.JobID)
	fmt.Fprintf(tw, "status\t%s\n", status)
	fmt.Fprintf(tw, "phase\t%s\n", orDash(st.Phase))
	fmt.Fprintf(tw, "created\t%s\n", st.CreatedAt)
	fmt.Fprintf(tw, "updated\t%s\n", st.UpdatedAt)
	fmt.Fprintf(tw, "error\t%s\n", orDash(st.Error))
	fallbacks := strings.Join(st.Fallbacks, ", ")
	fmt.Fprintf(tw, "fallbacks\t%s\n", orDash(&fallbacks))
	fmt.Fprintln(tw, "steps\t")
	for _, s := range st.Steps {
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", s.ID, s.Status, progress(s.Current, s.Total), s.Label)
	}
	return tw.Flush()
}

func orDash(s *string) string {
	if s == nil || *s == "" {
		return "-"
	}
	return *s
}

func progress(current, total int) string {
	switch {
	case total > 0:
		return fmt.Sprintf("%d/%d", current, total)
	case current > 0:
		return strconv.Itoa(current)
	}
	return ""
}

func runEvents(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("events", stdout, stderr)
	follow := fs.Bool("follow", false, "stream events as they come until the job ends")
	after := fs.Int64("after", 0, "show only events after this seq")
	cf := addClientFlags(fs)
	pos, err := positional(fs, args, "ID")
	if err != nil {
		return err
	}
	id := pos[0]
	if *after < 0 {
		return fmt.Errorf("--after must be 0 or more")
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	out := eventPrinter{stdout, *cf.json}
	if !*follow {
		_, err := c.pageEvents(ctx, id, *after, out)
		return err
	}
	_, err = c.follow(ctx, id, *after, out, stderr)
	if err != nil && ctx.Err() != nil {
		return nil // interrupted: how following ends before the job does
	}
	return err
}

type eventsPage struct {
	Events    []map[string]json.RawMessage `json:"events"`
	NextAfter int64                        `json:"next_after"`
}

// pageEvents prints the job's events after seq, page by page until next
// stops moving, and returns the last seq printed (after, if none).
func (c *client) pageEvents(ctx context.Context, id string, after int64, w eventPrinter) (int64, error) {
	for {
		var p eventsPage
		if _, _, err := c.call(ctx, http.MethodGet, jobPath(id, "events"), url.Values{"after": {strconv.FormatInt(after, 10)}}, nil, &p); err != nil {
			return after, err
		}
		for _, ev := range p.Events {
			w.print(ev)
		}
		if p.NextAfter <= after {
			return after, nil
		}
		after = p.NextAfter
	}
}

// eventPrinter prints events as lines of text, or (for scripts) as JSON
// lines.
type eventPrinter struct {
	w    io.Writer
	json bool
}

func (p eventPrinter) print(ev map[string]json.RawMessage) {
	if !p.json {
		writeEvent(p.w, ev)
		return
	}
	b, err := json.Marshal(ev)
	if err != nil {
		return // members are JSON already: cannot happen
	}
	p.w.Write(append(b, '\n'))
}

// writeEvent prints one event as a line: #seq time stage status message
// [current/total].
func writeEvent(w io.Writer, ev map[string]json.RawMessage) {
	var b strings.Builder
	if field(ev, "stage") == "-" {
		// An agent run's events have a type, not a stage and status.
		fmt.Fprintf(&b, "#%s %s %s", field(ev, "seq"), field(ev, "time"), field(ev, "type"))
	} else {
		fmt.Fprintf(&b, "#%s %s %s %s", field(ev, "seq"), field(ev, "time"), field(ev, "stage"), field(ev, "status"))
	}
	msg := field(ev, "message")
	if msg == "-" {
		msg = field(ev, "data")
	}
	b.WriteString(" " + strings.Join(strings.Fields(msg), " "))
	switch cur, total := field(ev, "current"), field(ev, "total"); {
	case total != "-":
		fmt.Fprintf(&b, " [%s/%s]", cur, total)
	case cur != "-":
		fmt.Fprintf(&b, " [%s]", cur)
	}
	if string(ev["truncated"]) == "true" {
		b.WriteString(" (truncated)")
	}
	b.WriteByte('\n')
	io.WriteString(w, b.String())
}

// field is an event member as text: a string's value, any other JSON as
// written, "-" when absent or null. Events are free-form objects by
// convention, so nothing may be assumed about a member's type.
func field(ev map[string]json.RawMessage, key string) string {
	raw, ok := ev[key]
	if !ok || len(raw) == 0 || string(raw) == "null" {
		return "-"
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		if s == "" {
			return "-"
		}
		return s
	}
	return string(raw)
}

// errNotStreaming: the server answered a stream request with JSON, as the
// API does where streaming is off.
var errNotStreaming = errors.New("the server does not stream events")

// follower follows one job's events, printing each once.
type follower struct {
	c       *client
	id      string
	after   int64 // the after of the stream's URL, kept on reconnect
	lastID  string
	lastSeq int64 // the newest seq printed; events at or before it are skipped
	retry   time.Duration
	opened  bool // a stream was opened once: there is something to resume
	w       eventPrinter
}

// follow prints the job's events after seq until the job ends, and returns
// its final status. It reads Server-Sent Events, reconnecting with
// Last-Event-ID when a connection drops, or polls JSON pages when the
// server does not stream.
func (c *client) follow(ctx context.Context, id string, after int64, stdout eventPrinter, stderr io.Writer) (string, error) {
	f := &follower{c: c, id: id, after: after, lastSeq: after, retry: reconnectDelay, w: stdout}
	fruitless := 0
	for {
		final, progressed, err := f.streamOnce(ctx)
		switch {
		case err == nil && final != "":
			return final, nil
		case errors.Is(err, errNotStreaming):
			return f.poll(ctx)
		case ctx.Err() != nil:
			return "", ctx.Err()
		case err != nil && !f.opened:
			return "", err // no stream was ever opened: nothing to resume
		case err != nil && !retryable(err):
			return "", err
		case err == nil:
			err = errors.New("the server closed the stream")
		}
		if progressed {
			fruitless = 0
		}
		fruitless++
		if fruitless > maxReconnects {
			return "", fmt.Errorf("following job %s: gave up after %d reconnection attempts: %w", id, maxReconnects, err)
		}
		wait := min(f.retry<<(fruitless-1), maxReconnectDelay)
		fmt.Fprintf(stderr, "event stream of job %s lost (%v); reconnecting in %s (attempt %d of %d)\n", id, err, wait, fruitless, maxReconnects)
		if err := sleep(ctx, wait); err != nil {
			return "", err
		}
	}
}

// retryable: worth reconnecting for. An API error is, when the server is
// overloaded or failing; any other error is the connection's.
func retryable(err error) bool {
	var ae *apiError
	if errors.As(err, &ae) {
		return ae.Status >= 500 || ae.Status == http.StatusTooManyRequests || ae.Status == http.StatusRequestTimeout
	}
	return true
}

// streamOnce reads one connection of the stream. It returns the job's final
// status when the stream ended with "end"; progressed says whether anything
// but the retry hint arrived.
func (f *follower) streamOnce(ctx context.Context) (final string, progressed bool, err error) {
	reqCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	idle := time.AfterFunc(followIdle, cancel)
	defer idle.Stop()
	req, err := f.c.request(reqCtx, http.MethodGet, jobPath(f.id, "events"), url.Values{"after": {strconv.FormatInt(f.after, 10)}}, nil)
	if err != nil {
		return "", false, err
	}
	req.Header.Set("Accept", "text/event-stream")
	if f.lastID != "" {
		req.Header.Set("Last-Event-ID", f.lastID)
	}
	res, err := f.c.send(req)
	if err != nil {
		return "", false, f.idleError(ctx, err)
	}
	defer res.Body.Close()
	if !strings.HasPrefix(res.Header.Get("Content-Type"), "text/event-stream") {
		return "", false, errNotStreaming
	}
	f.opened = true
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
	var id, event string
	var data []string
	for sc.Scan() {
		idle.Reset(followIdle)
		line := strings.TrimSuffix(sc.Text(), "\r")
		if line == "" {
			if event == "" && data == nil {
				continue
			}
			if id != "" {
				f.lastID = id
			}
			payload := strings.Join(data, "\n")
			if event == "end" {
				var end submitAnswer
				if err := json.Unmarshal([]byte(payload), &end); err != nil || end.Status == "" {
					return "", true, fmt.Errorf("the server ended the stream with %q, not a final status", payload)
				}
				return end.Status, true, nil
			}
			progressed = true
			f.print([]byte(payload))
			id, event, data = "", "", nil
			continue
		}
		if strings.HasPrefix(line, ":") {
			progressed = true // a keep-alive: the server is there
			continue
		}
		name, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch name {
		case "id":
			id = value
		case "event":
			event = value
		case "data":
			data = append(data, value)
		case "retry":
			if ms, err := strconv.Atoi(value); err == nil && ms > 0 {
				f.retry = time.Duration(ms) * time.Millisecond
			}
		}
	}
	if err := sc.Err(); err != nil {
		return "", progressed, f.idleError(ctx, f.c.transportError(err))
	}
	return "", progressed, nil
}

// idleError names a connection cut by the idle timer rather than by ctx.
func (f *follower) idleError(ctx context.Context, err error) error {
	if ctx.Err() == nil && errors.Is(err, context.Canceled) {
		return fmt.Errorf("nothing arrived for %s", followIdle)
	}
	return err
}

// print writes an event that has not been printed yet; a stream that
// resumes where it should sends none twice, but one that does not must not
// make the output repeat itself.
func (f *follower) print(payload []byte) {
	var ev map[string]json.RawMessage
	if err := json.Unmarshal(payload, &ev); err != nil {
		ev = map[string]json.RawMessage{"data": json.RawMessage(strconv.Quote(string(payload)))}
	}
	if seq, err := strconv.ParseInt(string(ev["seq"]), 10, 64); err == nil {
		if seq <= f.lastSeq {
			return
		}
		f.lastSeq = seq
	}
	f.w.print(ev)
}

// poll follows a job on a server that does not stream: pages of events,
// then the job's status, until the job has ended. The status is read
// before the events, so once it is final every event is in the pages read
// after it.
func (f *follower) poll(ctx context.Context) (string, error) {
	for {
		var st jobStatus
		if _, _, err := f.c.call(ctx, http.MethodGet, jobPath(f.id), nil, nil, &st); err != nil {
			return "", err
		}
		last, err := f.c.pageEvents(ctx, f.id, f.lastSeq, f.w)
		if err != nil {
			return "", err
		}
		f.lastSeq = last
		if store.Status(st.Status).Terminal() {
			return st.Status, nil
		}
		if err := sleep(ctx, pollInterval); err != nil {
			return "", err
		}
	}
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

func runCancel(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("cancel", stdout, stderr)
	cf := addClientFlags(fs)
	pos, err := positional(fs, args, "ID")
	if err != nil {
		return err
	}
	id := pos[0]
	c, err := cf.client()
	if err != nil {
		return err
	}
	var ans submitAnswer
	raw, _, err := c.call(ctx, http.MethodPost, jobPath(id, "cancel"), nil, nil, &ans)
	if err != nil {
		return err
	}
	if *cf.json {
		return writeJSON(stdout, raw)
	}
	fmt.Fprintf(stdout, "cancel requested: job %s (%s) stops shortly\n", ans.JobID, ans.Status)
	return nil
}

func runReport(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("report", stdout, stderr)
	cf := addClientFlags(fs)
	pos, err := positional(fs, args, "ID")
	if err != nil {
		return err
	}
	id := pos[0]
	c, err := cf.client()
	if err != nil {
		return err
	}
	rep, err := fetchReport(ctx, c, id)
	if err != nil {
		return err
	}
	if *cf.json {
		if err := writeJSON(stdout, rep.raw); err != nil {
			return err
		}
	} else if err := rep.print(stdout, stderr); err != nil {
		return err
	}
	if !rep.Complete {
		fmt.Fprintf(stderr, "note: job %s ended before its report was complete; this is what was written\n", id)
	}
	return nil
}

// reportAnswer is GET /v1/jobs/{id}/report as the CLI reads it.
type reportAnswer struct {
	Complete  bool              `json:"complete"`
	Markdown  string            `json:"markdown"`
	Sources   []json.RawMessage `json:"sources"`
	NotUsed   []json.RawMessage `json:"not_used"`
	Citations *struct {
		Total       int      `json:"total"`
		Supported   int      `json:"supported"`
		Unsupported int      `json:"unsupported"`
		Accuracy    *float64 `json:"accuracy"`
		Removed     int      `json:"removed"`
	} `json:"citations"`
	raw []byte
}

// fetchReport reads the job's report.
func fetchReport(ctx context.Context, c *client, id string) (reportAnswer, error) {
	var rep reportAnswer
	raw, _, err := c.call(ctx, http.MethodGet, jobPath(id, "report"), nil, nil, &rep)
	var ae *apiError
	if errors.As(err, &ae) && ae.Status == http.StatusConflict {
		status := ae.JobStatus
		if status == "" {
			status = "not finished"
		}
		return rep, fmt.Errorf("job still running (%s); follow it with `sandstep events %s --follow`: %w", status, id, err)
	}
	rep.raw = raw
	return rep, err
}

// print writes the markdown to w and a line on the citation check and the
// sources to notes.
func (r reportAnswer) print(w, notes io.Writer) error {
	md := r.Markdown
	if md != "" && !strings.HasSuffix(md, "\n") {
		md += "\n"
	}
	if _, err := io.WriteString(w, md); err != nil {
		return err
	}
	if r.Citations == nil {
		return nil
	}
	c := r.Citations
	line := "citations: nothing cited"
	if c.Total > 0 && c.Accuracy != nil {
		line = fmt.Sprintf("citations: %d of %d cited sentences supported by their sources (%.0f%%)", c.Supported, c.Total, *c.Accuracy*100)
		if c.Unsupported > 0 {
			line += fmt.Sprintf(", %d flagged", c.Unsupported)
		}
	}
	if c.Removed > 0 {
		line += ", " + count(c.Removed, "citation", "citations") + " of sources that do not exist removed"
	}
	_, err := fmt.Fprintf(notes, "%s; %s read, %d found but not used\n", line, count(len(r.Sources), "source", "sources"), len(r.NotUsed))
	return err
}

func count(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}
