// Package client is a Go client of sandstep's direct sandboxes API
// (/v1/sandboxes): create, exec with output streamed and resumed from its
// byte offset after any disconnect, files, terminate. Inside a sandbox,
// FromEnv uses SANDSTEP_URL and the sandbox's own SANDSTEP_TOKEN, which
// manages that sandbox's children.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"
)

// Client talks to one sandstep server. It is safe for concurrent use.
type Client struct {
	base  string
	token string
	http  *http.Client
	// ResumeDelay is the pause before reading on after a broken read.
	ResumeDelay time.Duration
	// MaxResumes bounds how many broken reads in a row that brought no
	// byte Output survives.
	MaxResumes int
}

// New returns a client of the server at baseURL with a bearer token.
// httpClient may be nil (http.DefaultClient).
func New(baseURL, token string, httpClient *http.Client) *Client {
	if httpClient == nil {
		httpClient = http.DefaultClient
	}
	return &Client{base: strings.TrimRight(baseURL, "/"), token: token, http: httpClient, ResumeDelay: 200 * time.Millisecond, MaxResumes: 20}
}

// FromEnv is New with SANDSTEP_URL and SANDSTEP_TOKEN, as every sandbox
// sandstep creates has them.
func FromEnv() (*Client, error) {
	u := os.Getenv("SANDSTEP_URL")
	if u == "" {
		return nil, errors.New("SANDSTEP_URL is not set")
	}
	return New(u, os.Getenv("SANDSTEP_TOKEN"), nil), nil
}

// Error is an error answer of the API.
type Error struct {
	Status  int
	Code    string `json:"code"`
	Message string `json:"message"`
	Field   string `json:"field"`
	// Limit and Max name the limit of a 429; RetryAfter is its header.
	Limit      string `json:"limit"`
	Max        int64  `json:"max"`
	RetryAfter time.Duration
}

func (e *Error) Error() string {
	if e.Limit != "" {
		return fmt.Sprintf("%d %s: %s (limit %s, retry after %s)", e.Status, e.Code, e.Message, e.Limit, e.RetryAfter)
	}
	return fmt.Sprintf("%d %s: %s", e.Status, e.Code, e.Message)
}

// Sandbox is a sandbox as the API shows it.
type Sandbox struct {
	ID           string            `json:"id"`
	Name         string            `json:"name"`
	Status       string            `json:"status"`
	ParentID     *string           `json:"parent_id"`
	PublicURLs   map[string]string `json:"public_urls"`
	Labels       map[string]string `json:"labels"`
	CreatedAt    time.Time         `json:"created_at"`
	ExpiresAt    time.Time         `json:"expires_at"`
	TTLRemaining int64             `json:"ttl_remaining"`
	Children     []string          `json:"children"`
	Reason       string            `json:"reason"`
	// Links are API paths: self, exec, files, events, and artifacts (with
	// the sandbox's URL token, to open in a browser).
	Links map[string]string `json:"links"`
}

// CreateRequest is a sandbox to create; zero fields take the server's
// defaults.
type CreateRequest struct {
	TTLSeconds  int               `json:"ttl_seconds,omitempty"`
	ExposePorts []int             `json:"expose_ports,omitempty"`
	Network     string            `json:"network,omitempty"`
	AllowHosts  []string          `json:"allow_hosts,omitempty"`
	MemoryMB    int               `json:"memory_mb,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
	Name        string            `json:"name,omitempty"`
}

// ExecRequest is a command; exactly one of Command and Argv.
type ExecRequest struct {
	Command        string            `json:"command,omitempty"`
	Argv           []string          `json:"argv,omitempty"`
	Cwd            string            `json:"cwd,omitempty"`
	Env            map[string]string `json:"env,omitempty"`
	Stdin          string            `json:"stdin,omitempty"`
	TimeoutSeconds int               `json:"timeout_seconds,omitempty"`
	Background     bool              `json:"background,omitempty"`
	KeepAlive      bool              `json:"keep_alive,omitempty"`
}

// Exec is an exec's state; Stdout and Stderr are set when it ended within
// the server's wait and its output fit inline.
type Exec struct {
	ExecID      string  `json:"exec_id"`
	Status      string  `json:"status"`
	ExitCode    *int    `json:"exit_code"`
	TimedOut    bool    `json:"timed_out"`
	Stdout      *string `json:"stdout"`
	Stderr      *string `json:"stderr"`
	StdoutBytes int64   `json:"stdout_bytes"`
	StderrBytes int64   `json:"stderr_bytes"`
	Truncated   bool    `json:"truncated"`
}

func (c *Client) do(ctx context.Context, method, path string, body io.Reader, ctype string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return nil, err
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	res, err := c.http.Do(req)
	if err != nil {
		return nil, err
	}
	if res.StatusCode >= 400 {
		defer res.Body.Close()
		var e struct {
			Error Error `json:"error"`
		}
		b, _ := io.ReadAll(io.LimitReader(res.Body, 1<<20))
		if json.Unmarshal(b, &e) != nil || e.Error.Code == "" {
			e.Error.Message = strings.TrimSpace(string(b))
		}
		e.Error.Status = res.StatusCode
		if ra, err := strconv.Atoi(res.Header.Get("Retry-After")); err == nil {
			e.Error.RetryAfter = time.Duration(ra) * time.Second
		}
		return nil, &e.Error
	}
	return res, nil
}

func (c *Client) json(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	ctype := ""
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body, ctype = bytes.NewReader(b), "application/json"
	}
	res, err := c.do(ctx, method, path, body, ctype)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	if out == nil {
		_, err = io.Copy(io.Discard, res.Body)
		return err
	}
	return json.NewDecoder(res.Body).Decode(out)
}

func sbPath(id string) string { return "/v1/sandboxes/" + url.PathEscape(id) }

// CreateSandbox starts a sandbox.
func (c *Client) CreateSandbox(ctx context.Context, req CreateRequest) (Sandbox, error) {
	var sb Sandbox
	err := c.json(ctx, http.MethodPost, "/v1/sandboxes", req, &sb)
	return sb, err
}

// Get reads a sandbox.
func (c *Client) Get(ctx context.Context, id string) (Sandbox, error) {
	var sb Sandbox
	err := c.json(ctx, http.MethodGet, sbPath(id), nil, &sb)
	return sb, err
}

// List returns every sandbox the token may see, following the pages.
func (c *Client) List(ctx context.Context) ([]Sandbox, error) {
	var all []Sandbox
	cursor := ""
	for {
		var page struct {
			Sandboxes  []Sandbox `json:"sandboxes"`
			NextCursor *string   `json:"next_cursor"`
		}
		path := "/v1/sandboxes?limit=100"
		if cursor != "" {
			path += "&cursor=" + url.QueryEscape(cursor)
		}
		if err := c.json(ctx, http.MethodGet, path, nil, &page); err != nil {
			return all, err
		}
		all = append(all, page.Sandboxes...)
		if page.NextCursor == nil {
			return all, nil
		}
		cursor = *page.NextCursor
	}
}

// TerminateSandbox ends a sandbox and its children (idempotent).
func (c *Client) TerminateSandbox(ctx context.Context, id string) error {
	return c.json(ctx, http.MethodPost, sbPath(id)+"/terminate", nil, nil)
}

// Exec starts a command; see Run for one that waits for its whole output.
func (c *Client) Exec(ctx context.Context, id string, req ExecRequest) (Exec, error) {
	var e Exec
	err := c.json(ctx, http.MethodPost, sbPath(id)+"/exec", req, &e)
	return e, err
}

// ExecStatus reads an exec's state (its output is read with Output).
func (c *Client) ExecStatus(ctx context.Context, id, execID string) (Exec, error) {
	var e Exec
	err := c.json(ctx, http.MethodGet, sbPath(id)+"/execs/"+url.PathEscape(execID), nil, &e)
	return e, err
}

// Event is one event of a sandbox's life (sandbox.created,
// sandbox.expiring, sandbox.expired, sandbox.terminated).
type Event struct {
	Type    string    `json:"type"`
	At      time.Time `json:"at"`
	Message string    `json:"message"`
}

// Events reads a sandbox's events.
func (c *Client) Events(ctx context.Context, id string) ([]Event, error) {
	var out struct {
		Events []Event `json:"events"`
	}
	err := c.json(ctx, http.MethodGet, sbPath(id)+"/events", nil, &out)
	return out.Events, err
}

// Run executes a command and copies its whole stdout and stderr into the
// writers (nil discards), resuming after broken reads; it returns the exit
// code.
func (c *Client) Run(ctx context.Context, id string, req ExecRequest, stdout, stderr io.Writer) (int, error) {
	e, err := c.Exec(ctx, id, req)
	if err != nil {
		return 0, err
	}
	if e.Stdout != nil && e.ExitCode != nil {
		if stdout != nil {
			io.WriteString(stdout, *e.Stdout)
		}
		if stderr != nil {
			io.WriteString(stderr, *e.Stderr)
		}
		return *e.ExitCode, nil
	}
	if stdout == nil {
		stdout = io.Discard
	}
	if stderr == nil {
		stderr = io.Discard
	}
	// Both streams at once, so that each arrives as it is written.
	errc := make(chan error, 1)
	go func() {
		_, err := c.Output(ctx, id, e.ExecID, "stderr", 0, stderr)
		errc <- err
	}()
	code, err := c.Output(ctx, id, e.ExecID, "stdout", 0, stdout)
	return code, errors.Join(err, <-errc)
}

// Output copies an exec's stream ("stdout" or "stderr") from offset into w
// as it arrives, until the exec ends, and returns its exit code. A read
// that breaks (the connection drops, the server restarts, a proxy answers
// 502, 503 or 504, a Lambda ends) is resumed from the last byte written,
// after a pause that doubles from ResumeDelay up to 5 s: w gets every byte
// exactly once. MaxResumes broken reads in a row that brought no byte end
// it with the last error.
func (c *Client) Output(ctx context.Context, id, execID, stream string, offset int64, w io.Writer) (int, error) {
	fails := 0
	retry := func(err error) error {
		if fails++; fails > c.MaxResumes {
			return fmt.Errorf("reading %s at offset %d: %w", stream, offset, err)
		}
		return sleep(ctx, min(c.ResumeDelay<<min(fails-1, 10), 5*time.Second))
	}
	for {
		path := fmt.Sprintf("%s/execs/%s/output?stream=%s&offset=%d&wait_ms=20000", sbPath(id), url.PathEscape(execID), url.QueryEscape(stream), offset)
		res, err := c.do(ctx, http.MethodGet, path, nil, "")
		if err != nil {
			if ctx.Err() != nil || !transient(err) {
				return 0, err
			}
			if err := retry(err); err != nil {
				return 0, err
			}
			continue
		}
		n, cerr := io.Copy(w, res.Body)
		res.Body.Close()
		offset += n
		next, _ := strconv.ParseInt(res.Header.Get("X-Sandstep-Next-Offset"), 10, 64)
		if n > 0 {
			fails = 0 // progress: only reads that bring nothing count
		}
		if cerr != nil || offset != next {
			// Broken mid-body: go on from what arrived.
			if cerr == nil {
				cerr = io.ErrUnexpectedEOF
			}
			if ctx.Err() != nil {
				return 0, ctx.Err()
			}
			if err := retry(cerr); err != nil {
				return 0, err
			}
			continue
		}
		fails = 0
		if res.Header.Get("X-Sandstep-Exec-Done") == "true" {
			code, _ := strconv.Atoi(res.Header.Get("X-Sandstep-Exit-Code"))
			return code, nil
		}
	}
}

// transient reports whether a failed request may succeed as it is later:
// the connection failed, or a gateway or the server was briefly unable.
func transient(err error) bool {
	var ae *Error
	if !errors.As(err, &ae) {
		return true
	}
	switch ae.Status {
	case http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	}
	return false
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

// WriteFile streams r into path in the sandbox.
func (c *Client) WriteFile(ctx context.Context, id, path string, r io.Reader) error {
	res, err := c.do(ctx, http.MethodPut, sbPath(id)+"/files?path="+url.QueryEscape(path), r, "application/octet-stream")
	if err != nil {
		return err
	}
	_, err = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	return err
}

// ReadFile streams path from the sandbox into w.
func (c *Client) ReadFile(ctx context.Context, id, path string, w io.Writer) (int64, error) {
	res, err := c.do(ctx, http.MethodGet, sbPath(id)+"/files?path="+url.QueryEscape(path), nil, "")
	if err != nil {
		return 0, err
	}
	defer res.Body.Close()
	return io.Copy(w, res.Body)
}

// FileInfo is one entry of a folder.
type FileInfo struct {
	Name  string `json:"name"`
	Path  string `json:"path"`
	Size  int64  `json:"size"`
	IsDir bool   `json:"is_dir"`
}

// ListFiles lists a folder of the sandbox.
func (c *Client) ListFiles(ctx context.Context, id, path string) ([]FileInfo, error) {
	var out struct {
		Files []FileInfo `json:"files"`
	}
	err := c.json(ctx, http.MethodGet, sbPath(id)+"/files?list=1&path="+url.QueryEscape(path), nil, &out)
	return out.Files, err
}

// Artifact is one file of a sandbox's artifacts folder; URL is where it is
// served (a path on the API).
type Artifact struct {
	Path        string `json:"path"`
	Size        int64  `json:"size"`
	ContentType string `json:"content_type"`
	URL         string `json:"url"`
}

// Artifacts lists the files of the sandbox's artifacts folder, at any
// depth, by path; truncated says the folder held more than one listing
// names.
func (c *Client) Artifacts(ctx context.Context, id string) (files []Artifact, truncated bool, err error) {
	var out struct {
		Artifacts []Artifact `json:"artifacts"`
		Truncated bool       `json:"truncated"`
	}
	err = c.json(ctx, http.MethodGet, sbPath(id)+"/artifacts", nil, &out)
	return out.Artifacts, out.Truncated, err
}
