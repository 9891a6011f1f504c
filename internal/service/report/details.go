package report

// Details is what sandstep says about a report beside its text: the
// sources it was written from, what was found but not used, and the
// citation check. GET /v1/jobs/{id}/report returns it with the markdown.
type Details struct {
	Sources   []UsedSource `json:"sources"`
	NotUsed   []NotUsed    `json:"not_used"`
	Citations Citations    `json:"citations"`
}

// How a source's text was read: the crawler's modes, or the search result.
const (
	ModeHTTP    = "http"
	ModeBrowser = "browser"
	ModePDF     = "pdf"
	ModeSnippet = "snippet" // the search engine's snippet: the page itself was not read
)

// UsedSource is a source whose text the report was written from. Chars
// counts the characters of that text as the writer got it; Truncated says
// the page or the prompt cut it.
type UsedSource struct {
	N         int    `json:"n"`
	URL       string `json:"url"`
	FinalURL  string `json:"final_url"`
	Title     string `json:"title"`
	Mode      string `json:"mode"`
	Chars     int    `json:"chars"`
	Truncated bool   `json:"truncated"`
	Pages     int    `json:"pages,omitempty"`
}

// NotUsed is a URL that was found but gave the report no text. Reason is a
// code of the crawler's closed set (challenge, redirect_loop, content_type,
// http_status, budget, timeout, policy, unreadable, fetch_error,
// duplicate, invalid_url); N is its source number when it had one.
type NotUsed struct {
	URL     string `json:"url"`
	N       int    `json:"n,omitempty"`
	Reason  string `json:"reason"`
	Message string `json:"message"`
}

// Citations is the claim-level citation check of a report.
//
// Every sentence that cites at least one source, as the writer wrote it,
// is a claim: Total counts them. A claim is supported when the best
// passage of one of its cited sources covers at least Threshold of its
// content words (weighted by rarity) and every number and quoted phrase of
// the sentence appears in one of its cited sources. A claim whose only
// citations name no source (a made-up [99]) is unsupported: the citations
// are removed (Removed counts them) and the sentence is left without one.
// Accuracy is Supported/Total, null when the report cites nothing.
type Citations struct {
	Total       int      `json:"total"`
	Supported   int      `json:"supported"`
	Unsupported int      `json:"unsupported"`
	Accuracy    *float64 `json:"accuracy"`
	Removed     int      `json:"removed"`
	Method      string   `json:"method"` // "extractive": lexical, no model
	Threshold   float64  `json:"threshold"`
	// Action is what was done with unsupported claims: annotate, drop
	// (their citations), or revise (the model rewrote them once; those
	// still unsupported after it are annotated).
	Action    string     `json:"action"`
	Flagged   []Flag     `json:"flagged"`
	Revisions []Revision `json:"revisions,omitempty"`
	// Omitted counts flagged claims left out of Flagged to keep the
	// details within the store's item size.
	Omitted int `json:"omitted,omitempty"`
}

// Why a claim is flagged.
const (
	WhyLowSupport     = "low_support"      // no cited passage covers enough of its content words
	WhyNumberNotFound = "number_not_found" // a number of it is in none of its cited sources
	WhyQuoteNotFound  = "quote_not_found"  // a quoted phrase of it is in none of its cited sources
	WhyNoSource       = "no_source"        // it cites only numbers that name no source
)

// Flag is an unsupported claim: the sentence as written, the sources it
// cites, the best passage found for it in them and its score, why it is
// flagged, and a passage of a source it does not cite that would support
// it, when there is one.
type Flag struct {
	Sentence  string   `json:"sentence"`
	Cited     []int    `json:"cited"`
	Removed   []int    `json:"removed,omitempty"`
	Score     float64  `json:"score"`
	Why       []string `json:"why"`
	Missing   []string `json:"missing,omitempty"`
	Passage   *Passage `json:"passage"`
	Elsewhere *Passage `json:"elsewhere,omitempty"`
	Action    string   `json:"action"` // "annotated" or "dropped"
}

// Passage is a stretch of a source's text.
type Passage struct {
	Source int     `json:"source"`
	Text   string  `json:"text"`
	Score  float64 `json:"score"`
}

// Revision is a sentence the model rewrote on a revise.
type Revision struct {
	Before string `json:"before"`
	After  string `json:"after"`
}
