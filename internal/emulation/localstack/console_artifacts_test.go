package localstack_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/sandstep/sandstep/internal/testkit/fixturesite"
)

// TestConsoleResearchArtifactsInABrowser: a research job whose summarizing
// agent left files in /workspace/artifacts shows them on its console page
// under the report, each opened with the token (a text one shown, any one
// saved from memory); a job that kept none shows no such list.
func TestConsoleResearchArtifactsInABrowser(t *testing.T) {
	b := newBrowser(t)
	site := fixturesite.Start(t, fixturesite.Options{Hosts: 1})
	agent := `mkdir -p /workspace/artifacts/data && printf 'a,b\n1,2\n' > /workspace/artifacts/data/table.csv && printf '\211PNG' > /workspace/artifacts/chart.png
url=$(printf '%s' "$PROMPT" | grep -o '"url":"[^"]*"' | head -1 | cut -d'"' -f4)
printf '{"sources":[{"title":"t","url":"%s","summary":"Kestrels summarized.","keyPoints":["one"]}],"overallInsights":["insight"]}' "$url"`
	cfg := fmt.Sprintf("[research]\nrender = \"never\"\n[research.agent]\nenabled = true\nmodel = \"m\"\ncommand = %q\n", agent)
	s := newStackWith(t, stackOpts{config: cfg, allowPrivate: site.AllowPrivate()})
	s.research(t, "console-artifacts", "light", "balanced", []string{site.Hosts[0].Page("/a")})

	b.signInAt(s.srv.URL + "/#/jobs/console-artifacts")
	b.until("the report and the kept artifacts", `document.querySelector('#report-body') &&
		document.querySelector('#artifacts button[data-path="data/table.csv"]') && document.querySelector('#artifacts button[data-path="chart.png"]')`, time.Minute)
	if got := eval[string](b, `[...document.querySelectorAll('#artifacts li')].map(li => li.textContent).join('|')`); got != "chart.png image/png, 4 bytes|data/table.csv text/csv; charset=utf-8, 8 bytes" {
		t.Errorf("the artifacts listed: %q", got)
	}
	b.accessible("a research job's page with artifacts")
	b.do("open the table", chromedp.Click(chromedp.CSS(`#artifacts button[data-path="data/table.csv"]`)))
	b.until("the table shown", `document.querySelector('#artifact-text') && document.querySelector('#artifact-text').textContent === 'a,b\n1,2\n'`, 30*time.Second)
	b.do("open the chart", chromedp.Click(chromedp.CSS(`#artifacts button[data-path="chart.png"]`)))
	b.until("the chart offered to save", `document.querySelector('#artifact h2').textContent === 'Artifact chart.png' &&
		document.querySelector('#artifact-save').href.startsWith('blob:') && !document.querySelector('#artifact-text')`, 30*time.Second)
	b.shot("research-artifacts")

	// A job whose sandbox left nothing shows no artifacts section.
	s2 := newStackWith(t, stackOpts{config: "[research]\nrender = \"never\"\n", allowPrivate: site.AllowPrivate()})
	s2.research(t, "console-no-artifacts", "light", "balanced", []string{site.Hosts[0].Page("/a")})
	b.signInAt(s2.srv.URL + "/#/jobs/console-no-artifacts")
	b.until("its report, and its artifacts known", `!!document.querySelector('#report-body') &&
		!document.querySelector('#artifacts-list').hasAttribute('aria-busy')`, time.Minute)
	if n := eval[int](b, `document.querySelector('#artifacts-list').childElementCount`); n != 0 {
		t.Errorf("a job that kept nothing shows an artifacts section of %d elements", n)
	}
}
