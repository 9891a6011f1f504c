package spec

// Why a URL gave no page: the code in Skipped.Reason. The set is closed, so
// that a supervisor can decide on it and a report can list it; Skipped.Message
// carries the specifics for people (the status, the redirect chain, the
// media type, the limit).
const (
	ReasonChallenge    = "challenge"     // an anti-bot interstitial, not the page
	ReasonRedirectLoop = "redirect_loop" // the redirects came back to a URL, or went on past the limit
	ReasonContentType  = "content_type"  // not a document the crawler reads: an image, an archive, a binary
	ReasonHTTPStatus   = "http_status"   // the server answered 4xx or 5xx
	ReasonBudget       = "budget"        // a page, host or time limit left it unfetched
	ReasonTimeout      = "timeout"       // the page took longer than page_timeout_ms
	ReasonPolicy       = "policy"        // the sandbox's egress policy refused the address
	ReasonUnreadable   = "unreadable"    // fetched, but no text came out (an empty page, a PDF without text or without an extractor)
	ReasonFetchError   = "fetch_error"   // DNS, connection, TLS or protocol failure
	ReasonDuplicate    = "duplicate"     // the same page as another URL of the crawl
	ReasonInvalidURL   = "invalid_url"   // not an http or https URL
)

// Reasons lists every code of Skipped.Reason.
var Reasons = []string{
	ReasonChallenge, ReasonRedirectLoop, ReasonContentType, ReasonHTTPStatus, ReasonBudget,
	ReasonTimeout, ReasonPolicy, ReasonUnreadable, ReasonFetchError, ReasonDuplicate, ReasonInvalidURL,
}

// KnownReason tells whether code is one of Reasons.
func KnownReason(code string) bool {
	for _, r := range Reasons {
		if r == code {
			return true
		}
	}
	return false
}
