package api

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io/fs"
	"net/http"
	"path"
	"time"
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

//go:embed console
var consoleFiles embed.FS

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

var consoleTypes = map[string]string{
	".html": "text/html; charset=utf-8",
	".js":   "text/javascript; charset=utf-8",
	".css":  "text/css; charset=utf-8",
	".svg":  "image/svg+xml",
}

// loadConsole reads the embedded files once. A file of a type not listed
// is a mistake in the repository, found by the tests at startup.
func loadConsole() (map[string]asset, error) {
	assets := map[string]asset{}
	err := fs.WalkDir(consoleFiles, "console", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		ct, ok := consoleTypes[path.Ext(p)]
		if !ok {
			return fmt.Errorf("console file %s: no content type for %q", p, path.Ext(p))
		}
		b, err := consoleFiles.ReadFile(p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		assets[path.Base(p)] = asset{body: b, contentType: ct, etag: `"` + hex.EncodeToString(sum[:8]) + `"`}
		return nil
	})
	return assets, err
}

func (s *server) consoleRoutes(mux *http.ServeMux) {
	assets, err := loadConsole()
	if err != nil {
		panic("api: " + err.Error())
	}
	spec := asset{body: openAPIDoc, contentType: "application/json; charset=utf-8"}
	sum := sha256.Sum256(openAPIDoc)
	spec.etag = `"` + hex.EncodeToString(sum[:8]) + `"`
	s.handle(mux, "GET /v1/openapi.json", func(w http.ResponseWriter, r *http.Request, c *call) error {
		serveAsset(w, r, spec)
		return nil
	}, public)
	s.handle(mux, "GET /{$}", func(w http.ResponseWriter, r *http.Request, c *call) error {
		serveAsset(w, r, assets["index.html"])
		return nil
	}, public)
	s.handle(mux, "GET /console/{file}", func(w http.ResponseWriter, r *http.Request, c *call) error {
		a, ok := assets[r.PathValue("file")]
		if !ok || a.contentType == consoleTypes[".html"] {
			return noRoute(r)
		}
		serveAsset(w, r, a)
		return nil
	}, public)
}

// serveAsset sends an embedded file. Browsers revalidate it every time
// (no-cache) and get a 304 while it is the same build's.
func serveAsset(w http.ResponseWriter, r *http.Request, a asset) {
	h := w.Header()
	h.Set("Content-Type", a.contentType)
	h.Set("Cache-Control", "no-cache")
	h.Set("ETag", a.etag)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Security-Policy", consoleCSP)
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Frame-Options", "DENY")
	http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(a.body))
}
