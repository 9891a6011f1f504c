package localstack_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/sandstep/sandstep/internal/testkit/fixturesite"
	"github.com/sandstep/sandstep/internal/testkit/testbin"
)

// citingModel is an OpenAI-compatible chat API that writes a report from
// the prompt it is given, finding the number of each fixture document by
// its URL there, as a model reads the numbered sources. For a question
// that contains "flawed" it also cites the wrong source for one sentence,
// invents a number in another and cites a source [99] that does not exist.
// It always ends with a references list of its own, which sandstep drops.
type citingModel struct {
	srv     *httptest.Server
	mu      sync.Mutex
	prompts []string
}

func newCitingModel(t *testing.T, study, paper string) *citingModel {
	m := &citingModel{}
	m.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Model    string `json:"model"`
			Messages []struct {
				Content string `json:"content"`
			} `json:"messages"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || len(req.Messages) != 2 {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		prompt := req.Messages[1].Content
		m.mu.Lock()
		m.prompts = append(m.prompts, prompt)
		m.mu.Unlock()
		idOf := func(u string) string {
			match := regexp.MustCompile(`(?m)^\[(\d+)\] .*\nURL: ` + regexp.QuoteMeta(u) + `\n`).FindStringSubmatch(prompt)
			if match == nil {
				return "0"
			}
			return match[1]
		}
		s, p := idOf(study), idOf(paper)
		var b strings.Builder
		b.WriteString("# Fieldwork\n\n## Executive summary\n\n")
		fmt.Fprintf(&b, "The ridge survey recorded 214 kestrel nests between 2019 and 2021 [%s]. ", s)
		fmt.Fprintf(&b, "Satellite tags were fitted to 38 peregrine falcons, which travelled a median distance of 4,200 kilometres to their wintering grounds [%s].\n\n", p)
		b.WriteString("## Key findings\n\n")
		fmt.Fprintf(&b, "- Juvenile falcons left the breeding cliffs eleven days later than the adults [%s].\n", p)
		if strings.Contains(prompt, "flawed") {
			fmt.Fprintf(&b, "- Most tagged falcons crossed the Mediterranean Sea within two days [%s].\n", s)
			fmt.Fprintf(&b, "- Of the surveyed nests, 87 percent fledged at least one chick [%s].\n", s)
			b.WriteString("- Kestrels also winter in the southern valleys [99].\n")
		}
		b.WriteString("\n## Evidence and context\n\nThe two studies cover different species.\n\n## Implications and trade-offs\n\nNone stated.\n\n## Open questions and next steps\n\nMore seasons.\n\n")
		b.WriteString("## References\n\n1. https://made-up.example/reference\n")
		w.Header().Set("Content-Type", "text/event-stream")
		data, _ := json.Marshal(map[string]any{"model": req.Model, "choices": []any{map[string]any{"index": 0, "delta": map[string]any{"content": b.String()}}}})
		fmt.Fprintf(w, "data: %s\n\ndata: [DONE]\n\n", data)
	}))
	t.Cleanup(m.srv.Close)
	return m
}

// reportJSON is GET /v1/jobs/{id}/report.
type reportJSON struct {
	Markdown string `json:"markdown"`
	Sources  []struct {
		N         int    `json:"n"`
		URL       string `json:"url"`
		FinalURL  string `json:"final_url"`
		Title     string `json:"title"`
		Mode      string `json:"mode"`
		Chars     int    `json:"chars"`
		Truncated bool   `json:"truncated"`
		Pages     int    `json:"pages"`
	} `json:"sources"`
	NotUsed []struct {
		URL     string `json:"url"`
		Reason  string `json:"reason"`
		Message string `json:"message"`
	} `json:"not_used"`
	Citations struct {
		Total       int      `json:"total"`
		Supported   int      `json:"supported"`
		Unsupported int      `json:"unsupported"`
		Accuracy    *float64 `json:"accuracy"`
		Removed     int      `json:"removed"`
		Flagged     []struct {
			Sentence string   `json:"sentence"`
			Cited    []int    `json:"cited"`
			Removed  []int    `json:"removed"`
			Why      []string `json:"why"`
			Missing  []string `json:"missing"`
			Score    float64  `json:"score"`
			Passage  *struct {
				Source int    `json:"source"`
				Text   string `json:"text"`
			} `json:"passage"`
			Elsewhere *struct {
				Source int    `json:"source"`
				Text   string `json:"text"`
			} `json:"elsewhere"`
		} `json:"flagged"`
	} `json:"citations"`
}

func (s *stack) reportJSON(t *testing.T, id string) reportJSON {
	t.Helper()
	req, _ := http.NewRequest("GET", s.srv.URL+"/v1/jobs/"+id+"/report", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var rep reportJSON
	if resp.StatusCode != 200 || json.Unmarshal(raw, &rep) != nil {
		t.Fatalf("report: %d %s", resp.StatusCode, raw)
	}
	return rep
}

// A research job over the fixture web, end to end through the local stack:
// a survey page and a PDF paper are read and cited; a challenge page, a
// redirect loop and a binary download are listed as not used with their
// reasons and never as sources; the model's citations are checked claim by
// claim against the text each source gave it.
func TestCitationCheckEndToEnd(t *testing.T) {
	testbin.RequireTool(t, "pdftotext", "poppler-utils")
	site := fixturesite.Start(t, fixturesite.Options{Hosts: 3})
	alpha, beta, gamma := site.Hosts[0], site.Hosts[1], site.Hosts[2]
	study, paper := alpha.Page(fixturesite.PathStudy), alpha.Page(fixturesite.PathPaper)
	challenge, loop, binary := beta.Page(fixturesite.PathChallenge), beta.Page(fixturesite.PathLoop), gamma.Page(fixturesite.PathBinary)
	seeds := []string{study, paper, challenge, loop, binary}
	model := newCitingModel(t, study, paper)
	cfg := fmt.Sprintf("[research]\nrender = \"never\"\n[research.llm]\nbase_url = %q\napi_key_env = \"\"\nmodels = [\"m\"]\n", model.srv.URL)
	s := newStackWith(t, stackOpts{config: cfg, allowPrivate: site.AllowPrivate()})

	for _, tc := range []struct {
		name, query string
		flawed      bool
	}{
		{"clean", "kestrel and falcon fieldwork", false},
		{"flawed", "kestrel and falcon fieldwork (flawed)", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := "job-cite-" + tc.name
			if code, out := s.do(t, "POST", "/v1/jobs", map[string]any{"query": tc.query, "job_id": id, "seed_urls": seeds}); code != http.StatusAccepted {
				t.Fatalf("submit: %d %v", code, out)
			}
			if job := s.wait(t, id); job["status"] != "succeeded" {
				t.Fatalf("job: %v", job)
			}
			rep := s.reportJSON(t, id)
			md := rep.Markdown

			// Sources: the survey page and the PDF, read; nothing else.
			ids := map[string]int{}
			for _, src := range rep.Sources {
				ids[src.URL] = src.N
				switch src.URL {
				case study:
					if src.Mode != "http" || src.Chars < 300 || src.FinalURL != study || src.Title != fixturesite.StudyTitle {
						t.Errorf("survey source = %+v", src)
					}
				case paper:
					if src.Mode != "pdf" || src.Pages != 3 || src.Title != fixturesite.PaperTitle || src.Chars < 300 {
						t.Errorf("PDF source = %+v", src)
					}
				default:
					t.Errorf("source %s was not read, yet is listed: %+v", src.URL, src)
				}
			}
			if len(ids) != 2 {
				t.Fatalf("sources = %+v", rep.Sources)
			}
			S, P := ids[study], ids[paper]
			reasons := map[string]string{}
			for _, nu := range rep.NotUsed {
				reasons[nu.URL] = nu.Reason
				if nu.Message == "" {
					t.Errorf("not used without a message: %+v", nu)
				}
			}
			for u, want := range map[string]string{challenge: "challenge", loop: "redirect_loop", binary: "content_type"} {
				if reasons[u] != want {
					t.Errorf("%s: not used for %q, want %q (not_used %+v)", u, reasons[u], want, rep.NotUsed)
				}
			}

			// The model got each source's text under its number, and
			// nothing it could not read.
			prompt := model.prompts[len(model.prompts)-1]
			if !strings.Contains(prompt, fmt.Sprintf("[%d] %s\nURL: %s\n(PDF, 3 pages)\n", P, fixturesite.PaperTitle, paper)) ||
				!strings.Contains(prompt, "Juvenile falcons left the breeding cliffs eleven days later than the adults.") ||
				strings.Contains(prompt, challenge) || strings.Contains(prompt, loop) || strings.Contains(prompt, binary) {
				t.Errorf("prompt:\n%s", prompt)
			}
			// The sources section is sandstep's: the model's references are gone.
			if strings.Contains(md, "made-up.example") || !strings.Contains(md, fmt.Sprintf("- [%d] [%s](<%s>): PDF, 3 pages, ", P, fixturesite.PaperTitle, paper)) ||
				!strings.Contains(md, "## Found but not used") || !strings.Contains(md, "<"+loop+">: redirect_loop") {
				t.Errorf("report:\n%s", md)
			}
			// The PDF is cited, and the check finds it says what is cited.
			pdfClaim := fmt.Sprintf("Juvenile falcons left the breeding cliffs eleven days later than the adults [%d].", P)
			if !strings.Contains(md, pdfClaim) {
				t.Errorf("report does not cite the PDF:\n%s", md)
			}
			c := rep.Citations
			if !tc.flawed {
				if c.Total != 3 || c.Supported != 3 || c.Unsupported != 0 || c.Accuracy == nil || *c.Accuracy != 1 || len(c.Flagged) != 0 || c.Removed != 0 ||
					strings.Contains(md, "unverified") || !strings.Contains(md, "All 3 cited sentences are supported") {
					t.Errorf("clean report: citations %+v\n%s", c, md)
				}
				return
			}
			// 3 sound claims and 3 bad ones: accuracy 0.5.
			if c.Total != 6 || c.Supported != 3 || c.Unsupported != 3 || c.Accuracy == nil || *c.Accuracy != 0.5 || c.Removed != 1 || len(c.Flagged) != 3 {
				t.Fatalf("citations = %+v", c)
			}
			wrong, invented, missing := c.Flagged[0], c.Flagged[1], c.Flagged[2]
			if !strings.HasPrefix(wrong.Sentence, "Most tagged falcons crossed") || wrong.Why[0] != "low_support" || len(wrong.Cited) != 1 || wrong.Cited[0] != S ||
				wrong.Elsewhere == nil || wrong.Elsewhere.Source != P || !strings.Contains(wrong.Elsewhere.Text, "Most tagged birds crossed the Mediterranean Sea within two days.") {
				t.Errorf("wrong source: %+v, elsewhere %+v", wrong, wrong.Elsewhere)
			}
			if !strings.HasPrefix(invented.Sentence, "Of the surveyed nests, 87 percent") || len(invented.Why) != 1 || invented.Why[0] != "number_not_found" ||
				len(invented.Missing) != 1 || invented.Missing[0] != "87" || invented.Passage == nil || invented.Passage.Source != S ||
				!strings.Contains(invented.Passage.Text, "Of those nests, 61 percent fledged at least one chick.") {
				t.Errorf("invented number: %+v, passage %+v", invented, invented.Passage)
			}
			if len(missing.Why) != 1 || missing.Why[0] != "no_source" || len(missing.Removed) != 1 || missing.Removed[0] != 99 {
				t.Errorf("nonexistent source: %+v", missing)
			}
			if strings.Contains(md, "[99]") || !strings.Contains(md, "Kestrels also winter in the southern valleys *(unverified)*.") ||
				!strings.Contains(md, "Of the surveyed nests, 87 percent fledged at least one chick ["+strconv.Itoa(S)+"] *(unverified)*.") ||
				!strings.Contains(md, "3 of 6 cited sentences are supported by the text of the sources they cite (50%)") {
				t.Errorf("report:\n%s", md)
			}
			// Every [n] left names a source the report was written from.
			for _, n := range regexp.MustCompile(`\[(\d+)\]`).FindAllStringSubmatch(md, -1) {
				if k, _ := strconv.Atoi(n[1]); k != S && k != P {
					t.Errorf("report cites [%d]", k)
				}
			}
		})
	}
	s.noLiveSandboxes(t, "job-cite-flawed")
}
