package crawler

import (
	"bytes"
	"net/http"
	"strings"
	"unicode/utf8"
)

// challengeMarkers only appear on interstitials of anti-bot services
// (Cloudflare, DDoS-Guard, Sucuri, PerimeterX, DataDome): their presence
// makes a page a challenge whatever its status.
var challengeMarkers = []string{
	"cf-browser-verification",
	"cf_chl_opt",
	"/cdn-cgi/challenge-platform/",
	"cf-challenge-running",
	"checking your browser before accessing",
	"attention required! | cloudflare",
	"ddos protection by",
	"ddos-guard",
	"sucuri website firewall",
	"px-captcha",
	"captcha-delivery.com",
}

// challengeTitles are titles that interstitials use. Regular pages can use
// them too ("Just a moment..." as a blog post title), so they count only on a
// page with little text or a blocking status.
var challengeTitles = []string{
	"just a moment",
	"checking your browser",
	"attention required",
	"access denied",
	"are you a robot",
	"verify you are human",
	"security check",
	"one more step",
}

// captchaMarkers are widgets that regular pages embed too (a contact form
// with reCAPTCHA); like titles they count only on a thin or blocked page.
var captchaMarkers = []string{
	"g-recaptcha",
	"h-captcha",
	"hcaptcha.com",
	"cf-turnstile",
	"challenges.cloudflare.com/turnstile",
	"please enable javascript and cookies to continue",
	"verify you are human",
	"enable cookies",
}

// thinText is the size under which extracted text is too small to be an
// article: a challenge, an empty shell waiting for JavaScript, an error page.
const thinText = 200

// isChallenge tells whether a response is an anti-bot interstitial rather than
// content. body may be a prefix of the page; title and text are what
// extraction found in it.
func isChallenge(status int, header http.Header, body []byte, title, text string) bool {
	if header != nil && strings.EqualFold(header.Get("Cf-Mitigated"), "challenge") {
		return true
	}
	// Markers sit in the head and the first scripts; scanning a prefix keeps
	// a 5 MiB page cheap.
	const scan = 256 << 10
	if len(body) > scan {
		body = body[:scan]
	}
	low := bytes.ToLower(body)
	for _, m := range challengeMarkers {
		if bytes.Contains(low, []byte(m)) {
			return true
		}
	}
	blocked := status == http.StatusForbidden || status == http.StatusServiceUnavailable || status == http.StatusTooManyRequests
	thin := utf8.RuneCountInString(text) < thinText
	if !blocked && !thin {
		return false
	}
	lowTitle := strings.ToLower(strings.TrimSpace(title))
	for _, t := range challengeTitles {
		if strings.HasPrefix(lowTitle, t) {
			return true
		}
	}
	for _, m := range captchaMarkers {
		if bytes.Contains(low, []byte(m)) {
			return true
		}
	}
	return false
}
