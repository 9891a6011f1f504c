package research

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sandstep/sandstep/internal/service/crawler/spec"
	"github.com/sandstep/sandstep/internal/service/store"
	"github.com/sandstep/sandstep/internal/service/urlnorm"
	"github.com/sandstep/sandstep/providers"
)

// The crawler's files in the sandbox.
const (
	crawlDir      = "/tmp/sandstep-crawl"
	crawlInput    = crawlDir + "/input.json"
	crawlOutput   = crawlDir + "/output.json"
	crawlProgress = crawlDir + "/progress.log"
	crawlExit     = crawlDir + "/exit"
	crawlPID      = crawlDir + "/pid"
	crawlStarted  = crawlDir + "/started"
)

// OriginBlocked marks a source whose page was an anti-bot challenge: it is
// kept for the record but never cited.
const OriginBlocked store.Origin = "blocked"

// CrawlInput is the Crawl state's input. Offset is how far the progress log
// was read by earlier rounds of the crawl loop; Slice counts those rounds.
type CrawlInput struct {
	JobID     string `json:"job_id"`
	SandboxID string `json:"sandbox_id"`
	Offset    int64  `json:"offset"`
	Slice     int    `json:"slice"`
}

// CrawlOutput tells the state machine whether to call Crawl again, and
// carries the loop's position into the next round.
type CrawlOutput struct {
	Done    bool  `json:"done"`
	Offset  int64 `json:"offset"`
	Slice   int   `json:"slice"`
	Sources int   `json:"sources"`
}

// Crawl runs the crawler inside the sandbox, in the background, and
// supervises it: it turns the crawler's progress lines into job events and,
// when the crawler is done, stores the pages as sources. One call supervises
// for a bounded slice of time (a Lambda may not run as long as a crawl) and
// returns done=false for the state machine to call it again.
func (p *Phases) Crawl(ctx context.Context, in CrawlInput) (CrawlOutput, error) {
	r, err := p.begin(ctx, "crawl", Input{JobID: in.JobID, SandboxID: in.SandboxID})
	if err != nil {
		return CrawlOutput{}, err
	}
	// One record per slice, keyed by the slice's number: the same when a
	// slice is delivered again, and new for the next slice even when the
	// crawler printed nothing in this one (the offset would not move).
	r.usageKey = fmt.Sprintf("crawl:%d", in.Slice)
	out, err := r.crawl(in)
	if err != nil && !providers.IsNotFound(err) && r.checkCancel() == nil && in.SandboxID != "" {
		// An exec cut short by a vanishing sandbox fails in whatever way
		// the backend reports; asking for the sandbox tells.
		if _, gerr := p.Provider.Get(r.ctx, in.SandboxID); providers.IsNotFound(gerr) {
			err = gerr
		}
	}
	if providers.IsNotFound(err) && r.checkCancel() == nil {
		// The sandbox is gone (preempted, expired): the job goes on
		// with what discovery found.
		out, err = CrawlOutput{Done: true, Offset: in.Offset}, r.sandboxLost(err)
	}
	out.Slice = in.Slice + 1
	return out, r.end(err)
}

func (r *run) sandboxLost(cause error) error {
	r.log.Warn("sandbox lost during the crawl", "err", cause)
	if err := r.step(store.StepCrawl, store.StepError, 0, 0); err != nil {
		return err
	}
	return r.fallback(FallbackSnippets, string(store.StepCrawl), "the sandbox is gone ("+cause.Error()+"): the report uses the search snippets")
}

func (r *run) crawl(in CrawlInput) (CrawlOutput, error) {
	if in.SandboxID == "" {
		return CrawlOutput{}, &BadInput{Message: "crawl needs sandbox_id"}
	}
	b, err := r.budget()
	if err != nil {
		return CrawlOutput{}, err
	}
	sliceEnd := time.Now().Add(r.p.crawlSlice())
	if dl, ok := r.ctx.Deadline(); ok && dl.Add(-30*time.Second).Before(sliceEnd) {
		// Leave the Lambda time to answer before it is cut off.
		sliceEnd = dl.Add(-30 * time.Second)
	}
	started, err := r.crawlStartedAt(in.SandboxID)
	if err != nil {
		return CrawlOutput{}, err
	}
	if started.IsZero() {
		if started, err = r.startCrawler(in.SandboxID); err != nil {
			return CrawlOutput{}, err
		}
	}
	// The crawler stops itself at its duration limit; past that and a grace
	// period it is stopped from here (it writes what it has on SIGTERM).
	hardStop := started.Add(b.Duration + time.Minute)
	offset := in.Offset
	// The first reads come soon and the wait doubles up to the poll
	// interval: a short crawl (a few pages) is over in milliseconds, and
	// a fixed first wait made up half of such a job's time.
	poll := r.p.pollInterval()
	wait := min(firstPoll, poll)
	stopped, restarted := false, false
	nextBudgetCheck := time.Now()
	for {
		if offset, err = r.readProgress(in.SandboxID, offset); err != nil {
			return CrawlOutput{}, err
		}
		code, done, err := r.crawlerExit(in.SandboxID)
		if err != nil {
			return CrawlOutput{}, err
		}
		if code == crawlerGone && offset == 0 && !restarted {
			// Killed with the exec that started it (the plugin or the
			// server died then) before it wrote a line: start it again.
			r.log.Warn("the crawler is gone before it began; starting it again")
			if started, err = r.startCrawler(in.SandboxID); err != nil {
				return CrawlOutput{}, err
			}
			hardStop, restarted = started.Add(b.Duration+time.Minute), true
			continue
		}
		if done {
			if code != 0 {
				r.log.Warn("crawler exited with an error", "exit_code", code)
			}
			break
		}
		now := time.Now()
		if !stopped && r.req.Budget != nil && !now.Before(nextBudgetCheck) {
			nextBudgetCheck = now.Add(budgetCheck)
			over, err := r.overBudget(store.Usage{})
			if err != nil {
				return CrawlOutput{}, err
			}
			if over != "" {
				if err := r.stopCrawler(in.SandboxID, "the job's budget is reached"); err != nil {
					return CrawlOutput{}, err
				}
				stopped = true
				if err := r.fallback(FallbackBudgetExhausted, string(store.StepCrawl), "the job's budget is reached ("+over+"): the crawl stops and keeps what it has"); err != nil {
					return CrawlOutput{}, err
				}
			}
		}
		if now.After(hardStop) && !stopped {
			if err := r.stopCrawler(in.SandboxID, "crawler past its duration"); err != nil {
				return CrawlOutput{}, err
			}
			stopped = true
		}
		if now.After(sliceEnd) {
			return CrawlOutput{Done: false, Offset: offset}, nil
		}
		select {
		case <-r.ctx.Done():
			if cerr := r.checkCancel(); cerr != nil {
				return CrawlOutput{}, cerr
			}
			return CrawlOutput{}, r.ctx.Err()
		case <-time.After(wait):
		}
		wait = min(2*wait, poll)
	}
	if offset, err = r.readProgress(in.SandboxID, offset); err != nil {
		return CrawlOutput{}, err
	}
	n, err := r.collect(in.SandboxID)
	if err != nil {
		return CrawlOutput{}, err
	}
	return CrawlOutput{Done: true, Offset: offset, Sources: n}, nil
}

func (p *Phases) crawlSlice() time.Duration {
	if p.CrawlSlice > 0 {
		return p.CrawlSlice
	}
	return 10 * time.Minute
}

// firstPoll is the crawl phase's first wait for the crawler's progress.
const firstPoll = 20 * time.Millisecond

func (p *Phases) pollInterval() time.Duration {
	if p.PollInterval > 0 {
		return p.PollInterval
	}
	return 500 * time.Millisecond
}

// sh runs a short shell command in the sandbox and returns its stdout.
func (r *run) sh(id, script string) (string, int, error) {
	var out bytes.Buffer
	res, err := r.exec(id, providers.ExecRequest{Shell: script, Stdout: &out, Timeout: time.Minute})
	if err != nil {
		return "", 0, err
	}
	return out.String(), res.ExitCode, nil
}

// crawlStartedAt reads when an earlier round started the crawler (zero: not
// started). A retried or looping Crawl never starts a second crawler.
func (r *run) crawlStartedAt(id string) (time.Time, error) {
	out, code, err := r.sh(id, "cat "+crawlStarted+" 2>/dev/null")
	if err != nil {
		return time.Time{}, fmt.Errorf("crawl state: %w", err)
	}
	sec, perr := strconv.ParseInt(strings.TrimSpace(out), 10, 64)
	if code != 0 || perr != nil {
		return time.Time{}, nil
	}
	return time.Unix(sec, 0), nil
}

// startCrawler writes the crawler's input and starts it in the background.
func (r *run) startCrawler(id string) (time.Time, error) {
	b, _ := r.budget()
	sources, err := r.p.Store.ListSources(r.ctx, r.job.ID)
	if err != nil {
		return time.Time{}, fmt.Errorf("list sources: %w", err)
	}
	in := spec.Input{
		Limits: spec.Limits{
			MaxPages:          b.Pages,
			MaxDepth:          b.Depth,
			MaxLinksPerPage:   b.LinksPerPage,
			MaxPagesPerHost:   b.PagesPerHost,
			MaxCharsPerSource: b.CharsPerSource,
			MaxDurationMS:     int(b.Duration / time.Millisecond),
		},
		Render:       r.p.Config.Research.Render,
		AllowPrivate: r.p.Config.Sandbox.AllowPrivate,
	}
	if slices.Contains(r.job.Fallbacks, FallbackHTTPMode) {
		// Provision found no browser: do not let the crawler look again.
		in.Render = spec.RenderNever
	}
	for _, s := range sources {
		in.Sources = append(in.Sources, spec.Source{N: s.N, URL: s.URL, Title: s.Title, Snippet: s.Snippet})
	}
	data, err := json.Marshal(in)
	if err != nil {
		return time.Time{}, err
	}
	if err := r.step(store.StepCrawl, store.StepRunning, 0, min(b.Pages, max(len(sources), 1))); err != nil {
		return time.Time{}, err
	}
	if err := r.p.Provider.WriteFile(r.ctx, id, providers.WriteFileRequest{Path: crawlInput, Content: bytes.NewReader(data)}); err != nil {
		return time.Time{}, fmt.Errorf("write crawler input: %w", err)
	}
	// The crawler runs detached from this exec; its exit status lands in a
	// file, which is how later rounds know it is done.
	script := fmt.Sprintf(`cd %[1]s && if [ -x %[2]s ]; then c=%[2]s; else c=%[3]s; fi
date +%%s > %[4]s.tmp && mv %[4]s.tmp %[4]s
nohup sh -c "\"$c\" --input %[5]s --output %[6]s > %[7]s 2> %[1]s/stderr.log; echo \$? > %[8]s.tmp; mv %[8]s.tmp %[8]s" > /dev/null 2>&1 &
echo $! > %[9]s`, crawlDir, mountedCrawler, uploadedCrawler, crawlStarted, crawlInput, crawlOutput, crawlProgress, crawlExit, crawlPID)
	if _, code, err := r.sh(id, script); err != nil || code != 0 {
		if err == nil {
			err = fmt.Errorf("exit %d", code)
		}
		return time.Time{}, fmt.Errorf("start crawler: %w", err)
	}
	if err := r.event("crawl:started", EventData{Stage: string(store.StepCrawl), Status: "running", Message: fmt.Sprintf("crawler started on %d sources (up to %d pages, %s, %s)", len(sources), b.Pages, b.DepthText(), b.Duration), Total: b.Pages}); err != nil {
		return time.Time{}, err
	}
	return time.Now(), nil
}

// crawlerGone is crawlerExit's code for a crawler that ended without an
// exit status: it was killed with the exec that started it (a provider may
// end an exec's whole process tree when its caller goes away).
const crawlerGone = -1

// crawlerExit reports the crawler's exit status once it has ended, or
// crawlerGone once neither it nor its status is there.
func (r *run) crawlerExit(id string) (int, bool, error) {
	// The status is read again after the liveness check: the crawler may
	// end between the two.
	script := fmt.Sprintf(`if [ -f %[1]s ]; then cat %[1]s; exit 0; fi
if [ -f %[2]s ] && kill -0 "$(cat %[2]s)" 2>/dev/null; then exit 3; fi
if [ -f %[1]s ]; then cat %[1]s; exit 0; fi
echo gone`, crawlExit, crawlPID)
	out, code, err := r.sh(id, script)
	if err != nil {
		return 0, false, fmt.Errorf("crawl state: %w", err)
	}
	if code != 0 {
		return 0, false, nil
	}
	if strings.TrimSpace(out) == "gone" {
		r.log.Warn("the crawler is gone without an exit status")
		return crawlerGone, true, nil
	}
	n, err := strconv.Atoi(strings.TrimSpace(out))
	if err != nil {
		return 0, false, nil
	}
	return n, true, nil
}

// stopCrawler sends SIGTERM to the crawler, on which it writes what it
// has. Only to the crawler: the shell around it (whose pid the file holds)
// is left to record its exit status, and the exec that started them, which
// ends its process group when that shell ends, to wait.
func (r *run) stopCrawler(id, why string) error {
	r.log.Warn(why + ": stopping the crawler")
	_, _, err := r.sh(id, "pkill -TERM -P \"$(cat "+crawlPID+")\" 2>/dev/null || pkill -TERM -f '[s]andstep-crawler --input' 2>/dev/null; true")
	return err
}

// readProgress reads the progress log from offset, turns each complete line
// into an event (keyed by its offset, so re-reading never duplicates one)
// and returns the offset after the last complete line.
func (r *run) readProgress(id string, offset int64) (int64, error) {
	var buf bytes.Buffer
	_, err := r.p.Provider.ReadFile(r.ctx, id, providers.ReadFileRequest{Path: crawlProgress, Offset: offset, Limit: 256 << 10}, &buf)
	if providers.IsNotFound(err) {
		return offset, nil
	}
	if err != nil {
		return offset, fmt.Errorf("read crawler progress: %w", err)
	}
	b := progressEvents(buf.Bytes(), offset)
	if len(b.evs) > 0 {
		if err := r.events(b.keys, b.evs); err != nil {
			return offset, err
		}
	}
	if last := b.last; last != nil && last.Status == spec.StatusRunning {
		if err := r.step(store.StepCrawl, store.StepRunning, last.Current, last.Total); err != nil {
			return offset, err
		}
	}
	return b.next, nil
}

// progressBatch is what one read of the progress log gives.
type progressBatch struct {
	keys []string // one per event: its offset in the log
	evs  []EventData
	last *spec.Progress // the last crawl line, if any
	next int64          // the offset after the last complete line
}

// progressEvents turns the complete lines of data, read from the log at
// offset, into events; a line not yet ended waits for the next read, and
// lines that are not progress are skipped. The log is written inside the
// sandbox, so nothing in it is trusted.
func progressEvents(data []byte, offset int64) progressBatch {
	b := progressBatch{next: offset}
	end := bytes.LastIndexByte(data, '\n')
	if end < 0 {
		return b
	}
	pos := offset
	for _, line := range bytes.SplitAfter(data[:end+1], []byte("\n")) {
		at := pos
		pos += int64(len(line))
		p, ok, err := spec.ParseProgress(string(line))
		if !ok || err != nil {
			continue
		}
		stage := p.Stage
		if stage != spec.StageBrowser {
			stage = string(store.StepCrawl)
		}
		msg := p.Message
		if msg == "" && p.URL != "" {
			msg = p.URL
		}
		b.keys = append(b.keys, "crawl:progress:"+strconv.FormatInt(at, 10))
		b.evs = append(b.evs, EventData{Stage: stage, Status: p.Status, Message: msg, Current: p.Current, Total: p.Total, URL: p.URL})
		if p.Stage == spec.StageCrawl {
			b.last = &p
		}
	}
	b.next = offset + int64(end+1)
	return b
}

// collect reads the crawler's output and stores its pages as sources. An
// output that cannot be read leaves the search snippets as the sources.
func (r *run) collect(id string) (int, error) {
	out, how, err := r.readOutput(id)
	if err != nil {
		if cerr := r.checkCancel(); cerr != nil {
			return 0, cerr
		}
		r.log.Warn("crawler output unreadable", "err", err)
		if err := r.step(store.StepCrawl, store.StepError, 0, 0); err != nil {
			return 0, err
		}
		return 0, r.fallback(FallbackSnippets, string(store.StepCrawl), "the crawler's output could not be read ("+err.Error()+"): the report uses the search snippets")
	}
	if how == FallbackChunkedRead {
		if err := r.fallback(FallbackChunkedRead, string(store.StepCrawl), "the output file came back truncated: read again in chunks"); err != nil {
			return 0, err
		}
	}
	sources, err := r.p.Store.ListSources(r.ctx, r.job.ID)
	if err != nil {
		return 0, fmt.Errorf("list sources: %w", err)
	}
	c := crawledSources(sources, out)
	put, skips, denied, blocked := c.put, c.skips, c.denied, c.blocked
	if len(put) > 0 {
		if err := r.p.Store.PutSources(r.ctx, r.job.ID, put); err != nil {
			return 0, fmt.Errorf("store pages: %w", err)
		}
	}
	if len(skips) > 0 {
		if err := r.p.Store.PutSkips(r.ctx, r.job.ID, skips); err != nil {
			return 0, fmt.Errorf("store skipped pages: %w", err)
		}
	}
	crawled := len(put) - blocked
	r.use.add(store.Usage{PagesCrawled: int64(out.Stats.Pages)})
	msg := fmt.Sprintf("%d pages crawled (%s mode), %d skipped", crawled, out.Stats.Mode, len(out.Skipped))
	if blocked > 0 {
		msg += fmt.Sprintf(", %d anti-bot challenge pages left out", blocked)
	}
	if len(denied) > 0 {
		msg += fmt.Sprintf(", %d refused by the network policy", len(denied))
		if err := r.event("crawl:denied", EventData{Stage: string(store.StepCrawl), Status: "complete", Message: deniedMessage(denied)}); err != nil {
			return 0, err
		}
	}
	if out.Stats.Stopped == spec.StoppedDuration || out.Stats.Stopped == spec.StoppedSignal {
		if err := r.fallback(FallbackPartialCrawl, string(store.StepCrawl), "the crawler reached its time limit: the report uses the "+strconv.Itoa(crawled)+" pages it collected"); err != nil {
			return 0, err
		}
	}
	if crawled == 0 {
		if err := r.fallback(FallbackSnippets, string(store.StepCrawl), "no page could be crawled: the report uses the search snippets"); err != nil {
			return 0, err
		}
	}
	if err := r.event("crawl:done", EventData{Stage: string(store.StepCrawl), Status: "complete", Message: msg, Current: out.Stats.Pages, Total: out.Stats.Pages}); err != nil {
		return 0, err
	}
	if err := r.step(store.StepCrawl, store.StepComplete, out.Stats.Pages, out.Stats.Pages); err != nil {
		return 0, err
	}
	return crawled, nil
}

// crawlResult is what the crawler's output adds to the job: the sources to
// store (blocked of them behind an anti-bot challenge), every skipped URL
// with its reason, and those the network policy refused.
type crawlResult struct {
	put     []store.Source
	blocked int
	skips   []store.Skip
	denied  []spec.Skipped
}

// crawledSources maps the crawler's output onto the job's sources: a seed's
// page fills its source, a page found by following a link keeps the
// number it got when a retried Crawl stored it before or takes the next
// one, and a seed behind an anti-bot challenge is marked blocked.
//
// The output comes from the sandbox and is not trusted to be consistent:
// a number is given once (the store refuses a batch that names one twice,
// which would fail the crawl), to the first page that claims it, a seed
// with a page is not blocked, and a reason the spec does not know becomes
// fetch_error with what the crawler said.
func crawledSources(sources []store.Source, out spec.Output) crawlResult {
	byN := map[int]store.Source{}
	byKey := map[string]int{}
	next := 0
	for _, s := range sources {
		byN[s.N] = s
		if u, err := urlnorm.Normalize(s.URL); err == nil {
			byKey[urlnorm.Key(u)] = s.N
		}
		next = max(next, s.N)
	}
	var c crawlResult
	taken := map[int]bool{}
	for _, pg := range out.Pages {
		if strings.TrimSpace(pg.Content) == "" {
			continue
		}
		s, seed := byN[pg.N]
		if pg.Parent != "" || !seed {
			u, err := urlnorm.Normalize(pg.URL)
			if n, ok := byKey[urlnorm.Key(u)]; err == nil && ok {
				s = byN[n]
			} else {
				next++
				s = store.Source{N: next, URL: pg.URL}
				if err == nil {
					// A second page of the same URL is the same source.
					byKey[urlnorm.Key(u)] = s.N
					byN[s.N] = s
				}
			}
		}
		if taken[s.N] {
			continue
		}
		taken[s.N] = true
		s.Origin = store.OriginCrawl
		s.Content = pg.Content
		s.FinalURL, s.Mode, s.Pages = pg.FinalURL, pg.Mode, pg.Pages
		if pg.Title != "" {
			s.Title = pg.Title
		}
		if s.Snippet == "" {
			s.Snippet = pg.Description
		}
		s.Truncated = s.Truncated || pg.Truncated
		c.put = append(c.put, s)
	}
	c.skips = make([]store.Skip, 0, len(out.Skipped))
	for _, sk := range out.Skipped {
		reason, msg := sk.Reason, sk.Message
		if !spec.KnownReason(reason) {
			// A crawler of another version: keep what it said.
			reason, msg = spec.ReasonFetchError, strings.TrimSpace(sk.Reason+": "+sk.Message)
		}
		if reason == spec.ReasonPolicy {
			c.denied = append(c.denied, sk)
		}
		u, err := urlnorm.Normalize(sk.URL)
		n, known := byKey[urlnorm.Key(u)]
		if err != nil || !known {
			n = 0
		}
		c.skips = append(c.skips, store.Skip{URL: sk.URL, Reason: reason, Message: msg, N: n})
		if reason == spec.ReasonChallenge && n > 0 && !taken[n] {
			taken[n] = true
			s := byN[n]
			s.Origin = OriginBlocked
			c.put = append(c.put, s)
			c.blocked++
		}
	}
	return c
}

// readOutput reads output.json through the file API in chunks. Some
// providers truncate large reads or answer garbage; then the file is read
// again through exec, in base64 chunks, which every provider supports.
func (r *run) readOutput(id string) (spec.Output, string, error) {
	var out spec.Output
	data, ferr := r.readFileChunked(id, crawlOutput)
	if ferr == nil {
		if err := json.Unmarshal(data, &out); err == nil {
			return out, "", nil
		}
	}
	if providers.IsNotFound(ferr) {
		return out, "", errors.New("the crawler wrote no output")
	}
	data, err := r.readViaExec(id, crawlOutput)
	if err != nil {
		return out, "", fmt.Errorf("file API: %v; exec: %w", ferr, err)
	}
	if err := json.Unmarshal(data, &out); err != nil {
		return out, "", fmt.Errorf("output is not valid JSON: %w", err)
	}
	return out, FallbackChunkedRead, nil
}

const readChunk = 1 << 20

func (r *run) readFileChunked(id, path string) ([]byte, error) {
	var buf bytes.Buffer
	for off := int64(0); ; {
		n, err := r.p.Provider.ReadFile(r.ctx, id, providers.ReadFileRequest{Path: path, Offset: off, Limit: readChunk}, &buf)
		if err != nil {
			return nil, err
		}
		off += n
		if n < readChunk {
			return buf.Bytes(), nil
		}
	}
}

// readViaExec reads a file with dd and base64 over exec, 48 KiB at a time,
// and checks the result against the size the sandbox reports.
func (r *run) readViaExec(id, path string) ([]byte, error) {
	sizeOut, code, err := r.sh(id, "wc -c < "+path)
	if err != nil || code != 0 {
		return nil, fmt.Errorf("size of %s: exit %d %v", path, code, err)
	}
	size, err := strconv.ParseInt(strings.TrimSpace(sizeOut), 10, 64)
	if err != nil {
		return nil, fmt.Errorf("size of %s: %q", path, sizeOut)
	}
	const chunk = 48 << 10
	var data bytes.Buffer
	for i := int64(0); int64(data.Len()) < size; i++ {
		b64, code, err := r.sh(id, fmt.Sprintf("dd if=%s bs=%d skip=%d count=1 2>/dev/null | base64 -w0", path, chunk, i))
		if err != nil || code != 0 {
			return nil, fmt.Errorf("read %s chunk %d: exit %d %v", path, i, code, err)
		}
		part, err := base64.StdEncoding.DecodeString(strings.TrimSpace(b64))
		if err != nil {
			return nil, fmt.Errorf("read %s chunk %d: %w", path, i, err)
		}
		if len(part) == 0 {
			break
		}
		data.Write(part)
	}
	if int64(data.Len()) != size {
		return nil, fmt.Errorf("read %d of %d bytes of %s", data.Len(), size, path)
	}
	return data.Bytes(), nil
}

// deniedMessage lists the URLs the network policy kept the crawler from,
// with the address refused and why.
func deniedMessage(denied []spec.Skipped) string {
	var b strings.Builder
	fmt.Fprintf(&b, "not fetched, by the sandbox's network policy (only public addresses and [sandbox] allow_private are reachable): ")
	for i, sk := range denied {
		if i == 20 {
			fmt.Fprintf(&b, "; and %d more", len(denied)-i)
			break
		}
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(sk.URL)
		if sk.Address != "" {
			b.WriteString(" (" + sk.Address + ")")
		}
	}
	return b.String()
}
