package report_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/sandstep/sandstep/internal/service/report"
	"github.com/sandstep/sandstep/internal/service/store"
)

// survey and telemetry are two sources on different subjects, with numbers.
var checkSources = []store.Source{
	{N: 1, URL: "https://survey.example/", Title: "Kestrel nest survey", Origin: store.OriginCrawl, Mode: "http",
		Content: "The ridge survey recorded 214 kestrel nests between 2019 and 2021. Of those nests, 61 percent fledged at least one chick.\n" +
			"Nest boxes facing east were occupied about a week earlier than boxes facing west. Rainfall in May was the strongest predictor of late clutches."},
	{N: 2, URL: "https://telemetry.example/paper.pdf", Title: "Falcon telemetry", Origin: store.OriginCrawl, Mode: "pdf", Pages: 3,
		Content: "Satellite tags were fitted to 38 peregrine falcons in the spring of 2020. The tagged falcons travelled a median distance of 4,200 kilometres to their wintering grounds.\n\n" +
			"Most tagged birds crossed the Mediterranean Sea within two days. Juvenile falcons left the breeding cliffs eleven days later than the adults."},
}

func finish(t *testing.T, body string, opt report.FinishOptions) report.Result {
	t.Helper()
	given := report.Select(checkSources, report.PromptOptions{})
	return report.Finish(t.Context(), "kestrels and falcons", body, given, nil, opt)
}

const cleanBody = "## Executive summary\n\nThe survey on the ridge recorded 214 kestrel nests from 2019 to 2021 [1]. " +
	"Satellite tags fitted to 38 peregrine falcons showed a median journey of 4,200 kilometres to the wintering grounds [2].\n\n" +
	"## Key findings\n\n- East-facing nest boxes were occupied earlier than west-facing ones [1].\n- Juvenile falcons left the cliffs 11 days after the adults [2].\n" +
	"- Rainfall in May predicted late clutches [1], and most tagged birds crossed the Mediterranean Sea within two days [2].\n"

func TestCleanReportScoresOne(t *testing.T) {
	res := finish(t, cleanBody, report.FinishOptions{})
	c := res.Details.Citations
	if c.Total != 5 || c.Supported != 5 || c.Unsupported != 0 || c.Accuracy == nil || *c.Accuracy != 1 || c.Removed != 0 || len(c.Flagged) != 0 {
		t.Fatalf("citations = %+v", c)
	}
	if strings.Contains(res.Markdown, "unverified") || !strings.Contains(res.Markdown, "All 5 cited sentences are supported") {
		t.Errorf("report:\n%s", res.Markdown)
	}
	if c.Method != "extractive" || c.Threshold != report.DefaultThreshold || c.Action != report.ActionAnnotate {
		t.Errorf("citations = %+v", c)
	}
}

// The three failures the check exists for: a sentence citing the wrong
// source, a number the source does not give, a source that does not exist.
func TestCheckFlagsWrongSourceInventedNumberAndMissingSource(t *testing.T) {
	body := cleanBody +
		"\n## Evidence and context\n\nMost tagged falcons crossed the Mediterranean Sea within two days [1]. " +
		"Of the surveyed nests, 87 percent fledged at least one chick [1]. " +
		"Kestrels also winter in the southern valleys [99]. " +
		"The survey counted 214 nests [1][42].\n"
	res := finish(t, body, report.FinishOptions{})
	c := res.Details.Citations
	// 5 clean + 4: the last is supported by [1] although [42] goes.
	if c.Total != 9 || c.Supported != 6 || c.Unsupported != 3 || *c.Accuracy != 0.6667 || c.Removed != 2 || len(c.Flagged) != 3 {
		t.Fatalf("citations = %+v", c)
	}
	wrong, number, none := c.Flagged[0], c.Flagged[1], c.Flagged[2]
	if wrong.Why[0] != report.WhyLowSupport || wrong.Score >= 0.5 || wrong.Elsewhere == nil || wrong.Elsewhere.Source != 2 ||
		!strings.HasSuffix(wrong.Elsewhere.Text, "Most tagged birds crossed the Mediterranean Sea within two days.") || wrong.Action != "annotated" ||
		len(wrong.Missing) != 1 || wrong.Missing[0] != "two" {
		t.Errorf("wrong source: %+v (elsewhere %+v)", wrong, wrong.Elsewhere)
	}
	if len(number.Why) != 1 || number.Why[0] != report.WhyNumberNotFound || len(number.Missing) != 1 || number.Missing[0] != "87" ||
		number.Passage == nil || number.Passage.Source != 1 || !strings.HasSuffix(number.Passage.Text, "Of those nests, 61 percent fledged at least one chick.") || number.Score < 0.5 {
		t.Errorf("invented number: %+v (passage %+v)", number, number.Passage)
	}
	if len(none.Why) != 1 || none.Why[0] != report.WhyNoSource || len(none.Cited) != 0 || len(none.Removed) != 1 || none.Removed[0] != 99 || none.Passage != nil {
		t.Errorf("missing source: %+v", none)
	}
	md := res.Markdown
	for _, want := range []string{
		"Most tagged falcons crossed the Mediterranean Sea within two days [1] *(unverified)*.",
		"Of the surveyed nests, 87 percent fledged at least one chick [1] *(unverified)*.",
		"Kestrels also winter in the southern valleys *(unverified)*.",
		"The survey counted 214 nests [1].",
		"6 of 9 cited sentences are supported by the text of the sources they cite (67%); 3 are not.",
		"2 citations of sources that do not exist were removed.",
		"87 is in none of \\[1\\]",
		"Most tagged birds crossed the Mediterranean Sea within two days.”",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
	if strings.Contains(md, "[99]") || strings.Contains(md, "[42]") {
		t.Errorf("report keeps a citation of a source that does not exist:\n%s", md)
	}
}

func TestQuotedPhraseMustBeInTheSource(t *testing.T) {
	body := "Nest boxes \"facing east\" were occupied earlier [1]. The survey calls this the \"eastern advantage\" [1].\n"
	c := finish(t, body, report.FinishOptions{}).Details.Citations
	if c.Total != 2 || c.Supported != 1 || len(c.Flagged) != 1 || c.Flagged[0].Why[len(c.Flagged[0].Why)-1] != report.WhyQuoteNotFound ||
		c.Flagged[0].Missing[0] != `"eastern advantage"` {
		t.Fatalf("citations = %+v", c)
	}
}

func TestDropAction(t *testing.T) {
	body := "Falcons nest in cities [1]. The survey recorded 214 kestrel nests [1].\n"
	res := finish(t, body, report.FinishOptions{Action: report.ActionDrop, Threshold: 0.6})
	c := res.Details.Citations
	if c.Unsupported != 1 || c.Flagged[0].Action != "dropped" || c.Action != report.ActionDrop || c.Threshold != 0.6 {
		t.Fatalf("citations = %+v", c)
	}
	if !strings.Contains(res.Markdown, "Falcons nest in cities. The survey recorded 214 kestrel nests [1].") ||
		!strings.Contains(res.Markdown, "The citations of these sentences were dropped") {
		t.Errorf("report:\n%s", res.Markdown)
	}
}

// Revise asks the model once with the flagged sentences and their
// passages, puts its sentences in place and checks again.
func TestReviseAction(t *testing.T) {
	answer := "```json\n[{\"id\": 1, \"sentence\": \"Most tagged birds crossed the Mediterranean Sea within two days [2].\"}, {\"id\": 2, \"sentence\": \"\"}]\n```"
	f := newFake(t, apiKey, map[string]behaviour{"m": streams(answer)})
	body := "## Evidence and context\n\nMost tagged falcons crossed the Mediterranean Sea within two days [1]. " +
		"Kestrels also winter in the southern valleys [99]. The survey recorded 214 kestrel nests [1].\n"
	res := finish(t, body, report.FinishOptions{Action: report.ActionRevise, Client: f.client(t, apiKey, "m")})
	if res.ReviseErr != nil {
		t.Fatal(res.ReviseErr)
	}
	c := res.Details.Citations
	if c.Total != 2 || c.Supported != 2 || len(c.Revisions) != 2 || c.Action != report.ActionRevise || c.Revisions[1].After != "" {
		t.Fatalf("citations = %+v", c)
	}
	if !strings.Contains(res.Markdown, "Most tagged birds crossed the Mediterranean Sea within two days [2]. The survey recorded 214 kestrel nests [1].") ||
		strings.Contains(res.Markdown, "southern valleys") {
		t.Errorf("report:\n%s", res.Markdown)
	}
	// The model saw each flagged sentence with its passages.
	msgs := f.requests[0]["messages"].([]any)
	user := msgs[1].(map[string]any)["content"].(string)
	if !strings.Contains(user, "Item 1\nSentence: Most tagged falcons crossed the Mediterranean Sea within two days [1].") ||
		!strings.Contains(user, "Most tagged birds crossed the Mediterranean Sea within two days.\n") || !strings.Contains(user, "Passage of [2]: ") ||
		!strings.Contains(user, "Item 2\nSentence: Kestrels also winter in the southern valleys [99].") {
		t.Errorf("revision prompt:\n%s", user)
	}
}

// A revision that fails leaves the report annotated, and says why.
func TestReviseFailureAnnotates(t *testing.T) {
	f := newFake(t, apiKey, map[string]behaviour{"m": status(http.StatusBadGateway, "Bad Gateway")})
	res := finish(t, "Falcons nest in cities [1].\n", report.FinishOptions{Action: report.ActionRevise, Client: f.client(t, apiKey, "m")})
	if res.ReviseErr == nil || !strings.Contains(res.Markdown, "Falcons nest in cities [1] *(unverified)*.") || res.Details.Citations.Flagged[0].Action != "annotated" {
		t.Fatalf("err %v, report:\n%s", res.ReviseErr, res.Markdown)
	}
	f = newFake(t, apiKey, map[string]behaviour{"m": streams("I cannot help with that.")})
	if res := finish(t, "Falcons nest in cities [1].\n", report.FinishOptions{Action: report.ActionRevise, Client: f.client(t, apiKey, "m")}); res.ReviseErr == nil {
		t.Fatal("an answer that is no JSON was taken as a revision")
	}
}

// The report's details are what the API returns: their JSON shape is the
// contract.
func TestDetailsJSON(t *testing.T) {
	given := report.Select(checkSources, report.PromptOptions{})
	notUsed := []report.NotUsed{{URL: "https://c.example/", N: 3, Reason: "challenge", Message: "an anti-bot challenge page"}}
	res := report.Finish(t.Context(), "q", "Kestrels also winter in the southern valleys [99].", given, notUsed, report.FinishOptions{})
	data, err := json.Marshal(res.Details)
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	json.Unmarshal(data, &got)
	src := got["sources"].([]any)[1].(map[string]any)
	if src["n"] != 2.0 || src["mode"] != "pdf" || src["pages"] != 3.0 || src["final_url"] != "https://telemetry.example/paper.pdf" || src["truncated"] != false || src["chars"] == nil {
		t.Errorf("source = %v", src)
	}
	if nu := got["not_used"].([]any)[0].(map[string]any); nu["reason"] != "challenge" || nu["url"] != "https://c.example/" {
		t.Errorf("not_used = %v", nu)
	}
	cit := got["citations"].(map[string]any)
	flag := cit["flagged"].([]any)[0].(map[string]any)
	if cit["accuracy"] != 0.0 || cit["total"] != 1.0 || flag["why"].([]any)[0] != "no_source" || flag["passage"] != nil {
		t.Errorf("citations = %v", cit)
	}
	// Nothing cited: accuracy is null, not a made-up 1.
	res = report.Finish(t.Context(), "q", "No claims here.", given, nil, report.FinishOptions{})
	data, _ = json.Marshal(res.Details.Citations)
	if !strings.Contains(string(data), `"accuracy":null`) || !strings.Contains(string(data), `"flagged":[]`) {
		t.Errorf("citations = %s", data)
	}
	if data, _ := json.Marshal(res.Details); !strings.Contains(string(data), `"not_used":[]`) {
		t.Errorf("details = %s", data)
	}
}
