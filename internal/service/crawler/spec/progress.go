package spec

import (
	"encoding/json"
	"fmt"
	"strings"
)

// ProgressPrefix starts every progress line, so that a supervisor can tell
// them from anything else the process prints.
const ProgressPrefix = "__PROGRESS__"

// Progress stages and statuses.
const (
	StageBrowser = "browser"
	StageCrawl   = "crawl"

	StatusRunning  = "running"
	StatusComplete = "complete"
	StatusError    = "error"
)

// Progress is one progress line. Current counts the pages finished (crawled
// or skipped); Total is the planned page budget, min(max_pages, URLs seen).
// Crawl lines always carry both numbers, zero included; other stages none.
type Progress struct {
	Stage   string `json:"stage"`
	Status  string `json:"status"`
	Current int    `json:"current"`
	Total   int    `json:"total"`
	URL     string `json:"url,omitempty"`
	Message string `json:"message,omitempty"`
}

// MarshalJSON leaves the counters out of lines that are not about pages.
func (p Progress) MarshalJSON() ([]byte, error) {
	type counted Progress
	if p.Stage == StageCrawl {
		return json.Marshal(counted(p))
	}
	return json.Marshal(struct {
		Stage   string `json:"stage"`
		Status  string `json:"status"`
		URL     string `json:"url,omitempty"`
		Message string `json:"message,omitempty"`
	}{p.Stage, p.Status, p.URL, p.Message})
}

// ParseProgress reads one line of crawler stdout. ok is false for a line that
// is not a progress line.
func ParseProgress(line string) (p Progress, ok bool, err error) {
	rest, found := strings.CutPrefix(strings.TrimRight(line, "\r\n"), ProgressPrefix)
	if !found {
		return Progress{}, false, nil
	}
	dec := json.NewDecoder(strings.NewReader(rest))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return Progress{}, true, fmt.Errorf("progress line: %w", err)
	}
	return p, true, nil
}
