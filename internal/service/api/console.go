package api

import (
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"net/http"
	"strconv"
	"strings"
)

// The web console and the API's description, served by the handler itself
// so that one ApiFunction (or one `sandstep serve`) is the whole product:
//
//	GET /                    the console's page
//	GET /console/{file}      its script, style sheet and icon
//	GET /v1/openapi.json     the OpenAPI 3.1 description of every route
//
// All three are public: they hold no one's data. The console signs in with
// a token it keeps in sessionStorage and sends only in the Authorization
// header of its API calls.

//go:embed openapi.json
var openAPIDoc []byte

// The console's files, each embedded on its own: the files are few, and
// embed.FS with a directory walk would cost the ApiFunction more code.
var (
	//go:embed console/index.html
	consoleIndex []byte
	//go:embed console/app.js
	consoleJS []byte
	//go:embed console/style.css
	consoleCSS []byte
	//go:embed console/icon.svg
	consoleIcon []byte
)

// OpenAPI returns the OpenAPI 3.1 description the handler serves at
// /v1/openapi.json. The caller must not modify it.
func OpenAPI() []byte { return openAPIDoc }

// consoleCSP lets the console run only its own script and style and talk
// only to its own origin: no inline script, no third-party anything, no
// framing. Links in a report open other sites in a new tab, which is a
// navigation CSP does not govern.
const consoleCSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; " +
	"form-action 'self'; base-uri 'none'; frame-ancestors 'none'"

// asset is one embedded file, ready to serve.
type asset struct {
	body        []byte
	contentType string
	etag        string
}

func newAsset(body []byte, contentType string) asset {
	sum := sha256.Sum256(body)
	return asset{body: body, contentType: contentType, etag: `"` + hex.EncodeToString(sum[:8]) + `"`}
}

func (s *server) consoleRoutes(mux *http.ServeMux) {
	spec := newAsset(openAPIDoc, "application/json; charset=utf-8")
	index := newAsset(consoleIndex, "text/html; charset=utf-8")
	files := map[string]asset{
		"app.js":    newAsset(consoleJS, "text/javascript; charset=utf-8"),
		"style.css": newAsset(consoleCSS, "text/css; charset=utf-8"),
		"icon.svg":  newAsset(consoleIcon, "image/svg+xml"),
	}
	s.handle(mux, "GET /v1/openapi.json", func(w http.ResponseWriter, r *http.Request, c *call) error {
		serveAsset(w, r, spec)
		return nil
	}, public)
	s.handle(mux, "GET /{$}", func(w http.ResponseWriter, r *http.Request, c *call) error {
		serveAsset(w, r, index)
		return nil
	}, public)
	s.handle(mux, "GET /console/{file}", func(w http.ResponseWriter, r *http.Request, c *call) error {
		a, ok := files[r.PathValue("file")]
		if !ok {
			return noRoute(r)
		}
		serveAsset(w, r, a)
		return nil
	}, public)
}

// serveAsset sends an embedded file. Browsers revalidate it every time
// (no-cache) and get a 304 while it is the same build's. (Not
// http.ServeContent: its ranges and content sniffing would cost the
// ApiFunction about 0.1 MB for files that need neither.)
func serveAsset(w http.ResponseWriter, r *http.Request, a asset) {
	h := w.Header()
	h.Set("Cache-Control", "no-cache")
	h.Set("ETag", a.etag)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Security-Policy", consoleCSP)
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Frame-Options", "DENY")
	if etagMatches(r.Header.Get("If-None-Match"), a.etag) {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	h.Set("Content-Type", a.contentType)
	h.Set("Content-Length", strconv.Itoa(len(a.body)))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(a.body)
}

// etagMatches reads If-None-Match: a list of entity tags, weak or not, or *.
func etagMatches(header, etag string) bool {
	for _, t := range strings.Split(header, ",") {
		t = strings.TrimPrefix(strings.TrimSpace(t), "W/")
		if t == etag || t == "*" {
			return true
		}
	}
	return false
}
