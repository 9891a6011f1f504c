package localstack_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// consoleAgent works in its sandbox until /workspace/go appears (the test
// puts it there, or cancels the run), keeps an artifact and answers in
// Markdown.
const consoleAgent = `[agents.notes]
command = '''
echo "reading the notes"
printf '# Kestrels\n\nThey hover facing the wind.\n' > "$SANDSTEP_ARTIFACTS_DIR/notes.md"
i=0; while [ ! -e /workspace/go ] && [ $i -lt 900 ]; do sleep 0.2; i=$((i+1)); done
echo "## Answer"
echo "Kestrels **hover** facing the wind."
'''
output = "text"
network = "none"
`

// TestConsoleAgentRunInABrowser: an agent run in the console. The jobs list
// links it to its own page, whose events arrive live while the agent works,
// then its answer rendered as Markdown, its exit status and its artifacts,
// opened with the token (a text one shown, any one saved from memory); a
// second run is cancelled from its page and shows what it printed.
func TestConsoleAgentRunInABrowser(t *testing.T) {
	b := newBrowser(t)
	s := newStackWith(t, stackOpts{allowPrivate: []string{"127.0.0.1:1"}, config: consoleAgent})
	submit := func(id string) {
		t.Helper()
		if code, out := s.do(t, "POST", "/v1/agent-runs", map[string]any{"agent": "notes", "prompt": "Summarize the notes", "job_id": id, "timeout_seconds": 300}); code != http.StatusAccepted {
			t.Fatalf("submit %s: %d %v", id, code, out)
		}
	}
	submit("agent-1")
	b.signInAt(s.srv.URL + "/")
	b.do("open the jobs", chromedp.WaitVisible(chromedp.CSS("#submit-form")))
	b.until("the run listed", `[...document.querySelectorAll('tbody a')].some(a => a.getAttribute('href') === '#/agent-runs/agent-1')`, time.Minute)
	if q := eval[string](b, `[...document.querySelectorAll('tbody tr')].find(tr => tr.querySelector('a').textContent === 'agent-1').querySelector('td.q').textContent`); q != "agent notes: Summarize the notes" {
		t.Errorf("the list describes the run as %q", q)
	}
	b.do("open the run", chromedp.Click(chromedp.CSS(`tbody a[href="#/agent-runs/agent-1"]`)))
	// Live: the agent's first line is on the page while it still works.
	b.until("the agent's first line while it runs", `location.hash === '#/agent-runs/agent-1' && [...document.querySelectorAll('#run-events li[data-type="agent.message"]')].some(li => li.textContent.includes('reading the notes'))`, 2*time.Minute)
	if got := eval[string](b, `document.querySelector('#job-status .badge').textContent`); got != "running" {
		t.Errorf("the run is %q while its agent waits", got)
	}
	b.shot("agent-1-running")
	b.accessible("a running agent run's page")

	_, run := s.do(t, "GET", "/v1/agent-runs/agent-1", nil)
	sandbox, _ := run["sandbox_id"].(string)
	if sandbox == "" {
		t.Fatalf("the run has no sandbox: %v", run)
	}
	req, _ := http.NewRequest("PUT", s.srv.URL+"/v1/sandboxes/"+sandbox+"/files?path=/workspace/go", strings.NewReader("go"))
	req.Header.Set("Authorization", "Bearer "+token)
	if res, err := http.DefaultClient.Do(req); err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("letting the agent go: %v %v", res, err)
	} else {
		res.Body.Close()
	}
	b.until("the run succeeded with its answer, artifacts and last event", `document.querySelector('#job-status .badge').textContent === 'succeeded' &&
		document.querySelector('#run-events li[data-type="job.succeeded"]') &&
		document.querySelector('#answer strong') && document.querySelector('#artifacts button[data-path="notes.md"]')`, 2*time.Minute)
	if got := eval[string](b, `document.querySelector('#answer strong').textContent + '|' + document.querySelector('#answer h3').textContent + '|' + document.querySelector('#exit').textContent`); got != "hover|Answer|Exit status 0" {
		t.Errorf("the answer as shown: %q", got)
	}
	types := eval[[]string](b, `[...document.querySelectorAll('#run-events li')].map(li => li.dataset.type)`)
	var want []string
	for _, ev := range s.events(t, "agent-1") {
		want = append(want, fmt.Sprint(ev["type"]))
	}
	if strings.Join(types, " ") != strings.Join(want, " ") || len(want) == 0 || want[len(want)-1] != "job.succeeded" {
		t.Errorf("the page shows the events %v; the run has %v", types, want)
	}
	b.do("open the artifact", chromedp.Click(chromedp.CSS(`#artifacts button[data-path="notes.md"]`)))
	b.until("the artifact shown", `document.querySelector('#artifact-text') && document.querySelector('#artifact-text').textContent.startsWith('# Kestrels')`, 30*time.Second)
	if href := eval[string](b, `document.querySelector('#artifact-save').href`); !strings.HasPrefix(href, "blob:") {
		t.Errorf("the artifact is saved from %q, want the copy in memory (a link cannot carry the token)", href)
	}
	b.shot("agent-1-succeeded")
	b.accessible("a finished agent run's page")

	// A second run, cancelled from its page while the agent waits.
	submit("agent-2")
	b.do("open the second run", chromedp.Navigate(s.srv.URL+"/#/agent-runs/agent-2"))
	b.until("the second agent working", `[...document.querySelectorAll('#run-events li[data-type="agent.message"]')].length > 0 && document.querySelector('#job-status .badge').textContent === 'running'`, 2*time.Minute)
	b.do("cancel", chromedp.Click(chromedp.CSS("#cancel")))
	b.until("the second run cancelled with what it printed", `document.querySelector('#job-status .badge').textContent === 'cancelled' &&
		document.querySelector('#answer') && document.querySelector('#answer').textContent.includes('reading the notes') &&
		document.querySelector('#result h2').textContent.includes('partial')`, 2*time.Minute)
	b.shot("agent-2-cancelled")

	b.mu.Lock()
	defer b.mu.Unlock()
	for _, e := range b.errs {
		t.Errorf("browser: %s", e)
	}
	s.noLiveSandboxes(t, "agent-2")
}
