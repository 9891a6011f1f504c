package api

import (
	"errors"
	"fmt"
	"html"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/sandstep/sandstep/internal/service/artifacts"
	"github.com/sandstep/sandstep/internal/service/store"
)

// Artifacts are files whatever ran in a sandbox left in its artifacts
// folder. Every folder has a listing at its own URL and a typed file below
// it:
//
//	GET /v1/jobs/{id}/artifacts[/{path...}]        what a research job's cleanup kept (store)
//	GET /v1/agent-runs/{id}/artifacts[/{path...}]  what an agent run kept (store)
//	GET /v1/sandboxes/{id}/artifacts[/{path...}]   a live sandbox's folder, read in the sandbox
//
// A file is served with Content-Security-Policy: sandbox, so a page a
// sandbox made never runs scripts on sandstep's origin.

// artifactView is one file of a listing; URL is where it is served.
type artifactView struct {
	Path        string `json:"path"`
	Size        int64  `json:"size"`
	ContentType string `json:"content_type"`
	URL         string `json:"url"`
}

// artifactList answers a folder's URL. Truncated says a sandbox's folder
// held more files than one listing names (artifacts.ListLimit).
type artifactList struct {
	Artifacts []artifactView `json:"artifacts"`
	Truncated bool           `json:"truncated"`
}

// artifactURL is where the file at p (relative to the folder) is served
// under base, each segment escaped: names may hold '#', '?' or spaces.
func artifactURL(base, p string) string {
	segs := strings.Split(p, "/")
	for i, s := range segs {
		segs[i] = url.PathEscape(s)
	}
	return base + "/artifacts/" + strings.Join(segs, "/")
}

// keptArtifacts lists what a job (a research job's cleanup, or an agent
// run) kept; the list is whole, as a job keeps at most artifacts.MaxFiles.
func (s *server) keptArtifacts(w http.ResponseWriter, r *http.Request, c *call) error {
	job, err := s.job(r, c)
	if err != nil {
		return err
	}
	kept, err := s.opts.Store.Artifacts(r.Context(), job.ID)
	if err != nil {
		return err
	}
	base := linksOf(job).Self
	v := artifactList{Artifacts: make([]artifactView, 0, len(kept))}
	for _, a := range kept {
		v.Artifacts = append(v.Artifacts, artifactView{Path: a.Path, Size: a.Size, ContentType: a.ContentType, URL: artifactURL(base, a.Path)})
	}
	return writeJSON(w, http.StatusOK, v)
}

// agentArtifact serves a kept artifact with its content type; it outlives
// the sandbox.
func (s *server) agentArtifact(w http.ResponseWriter, r *http.Request, c *call) error {
	return s.artifact(w, r, c, "agent run")
}

// jobArtifact is a file a research job's cleanup kept from its sandbox's
// artifacts folder (artifacts.Dir), or an agent run's.
func (s *server) jobArtifact(w http.ResponseWriter, r *http.Request, c *call) error {
	return s.artifact(w, r, c, "job")
}

func (s *server) artifact(w http.ResponseWriter, r *http.Request, c *call, noun string) error {
	job, err := s.job(r, c)
	if err != nil {
		return err
	}
	p := r.PathValue("path")
	if err := checkWorkspacePath(p); err != nil {
		return invalid("path", "path: %v", err)
	}
	a, err := s.opts.Store.GetArtifact(r.Context(), job.ID, p)
	if errors.Is(err, store.ErrNotFound) {
		return &Error{Status: http.StatusNotFound, Code: CodeNotFound, JobID: job.ClientID, Message: fmt.Sprintf("%s %q has no artifact %q", noun, job.ClientID, p)}
	}
	if err != nil {
		return err
	}
	artifactHeaders(w.Header(), a.ContentType, int64(len(a.Data)))
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		_, _ = w.Write(a.Data)
	}
	return nil
}

func artifactHeaders(h http.Header, contentType string, size int64) {
	h.Set("Content-Type", contentType)
	h.Set("Content-Length", strconv.FormatInt(size, 10))
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "private, no-cache")
	h.Set("Content-Security-Policy", "sandbox")
}

// keepURLToken sets the cookie that lets a browser, after a first visit
// with ?token=, follow links under prefix without the token in them.
func keepURLToken(w http.ResponseWriter, r *http.Request, id, token, prefix string) {
	http.SetCookie(w, &http.Cookie{Name: urlTokenCookie(id), Value: token, Path: prefix,
		HttpOnly: true, SameSite: http.SameSiteLaxMode, Secure: r.TLS != nil})
}

// artifactsAccess lets a request on a sandbox's artifacts routes in (see
// publicAccess); a token in the query becomes the cookie of the folder
// and its files.
func (s *server) artifactsAccess(w http.ResponseWriter, r *http.Request, c *call) (store.DirectSandbox, error) {
	id := r.PathValue("id")
	d, fromQuery, err := s.publicAccess(r, c, id)
	if err == nil && fromQuery {
		keepURLToken(w, r, id, d.URLToken, "/v1/sandboxes/"+id+"/artifacts")
	}
	return d, err
}

// sandboxArtifacts lists a live sandbox's artifacts folder: JSON, or a
// page of links for a browser (one that asks for text/html before JSON),
// which is how links.artifacts is usually opened.
func (s *server) sandboxArtifacts(w http.ResponseWriter, r *http.Request, c *call) error {
	d, err := s.artifactsAccess(w, r, c)
	if err != nil {
		return err
	}
	files, cut, err := s.opts.Sandboxes.Artifacts(r.Context(), d)
	if err != nil {
		return directError(c, err)
	}
	base := "/v1/sandboxes/" + d.ID
	v := artifactList{Artifacts: make([]artifactView, 0, len(files)), Truncated: cut}
	for _, f := range files {
		v.Artifacts = append(v.Artifacts, artifactView{Path: f.Path, Size: f.Size, ContentType: artifacts.ContentType(f.Path), URL: artifactURL(base, f.Path)})
	}
	w.Header().Add("Vary", "Accept")
	if !prefersHTML(r.Header.Get("Accept")) {
		return writeJSON(w, http.StatusOK, v)
	}
	page := artifactsPage(d.Name, d.ID, s.opts.Sandboxes.ArtifactsDir(), v)
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Content-Length", strconv.Itoa(len(page)))
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; sandbox")
	w.WriteHeader(http.StatusOK)
	_, _ = io.WriteString(w, page)
	return nil
}

// prefersHTML says whether an Accept header asks for text/html before
// JSON, as browsers' do; curl's */* and clients that ask for nothing get
// JSON.
func prefersHTML(accept string) bool {
	h := strings.Index(accept, "text/html")
	j := strings.Index(accept, "application/json")
	return h >= 0 && (j < 0 || h < j)
}

// artifactsPage is the listing as a page of links; every name in it is
// the sandbox's, so every one is escaped.
func artifactsPage(name, id, dir string, v artifactList) string {
	title := "Artifacts of sandbox " + id
	if name != "" {
		title = "Artifacts of " + name + " (" + id + ")"
	}
	var b strings.Builder
	b.WriteString(`<!doctype html><html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">`)
	fmt.Fprintf(&b, "<title>%s</title>", html.EscapeString(title))
	b.WriteString(`<style>body{font:16px/1.5 system-ui,sans-serif;margin:2rem auto;max-width:60rem;padding:0 1rem;color:#1a1a1a}` +
		`table{border-collapse:collapse;width:100%}th,td{text-align:left;padding:.3rem .6rem;border-bottom:1px solid #ccc}` +
		`td.n{text-align:right;font-variant-numeric:tabular-nums}a{color:#0b57d0}</style></head><body>`)
	fmt.Fprintf(&b, "<h1>%s</h1>", html.EscapeString(title))
	if len(v.Artifacts) == 0 {
		fmt.Fprintf(&b, "<p>No files in <code>%s</code> yet.</p>", html.EscapeString(dir))
	} else {
		fmt.Fprintf(&b, "<p>%d files in <code>%s</code>.</p>", len(v.Artifacts), html.EscapeString(dir))
		b.WriteString(`<table><thead><tr><th scope="col">File</th><th scope="col">Size (bytes)</th><th scope="col">Type</th></tr></thead><tbody>`)
		for _, a := range v.Artifacts {
			fmt.Fprintf(&b, `<tr><td><a href="%s">%s</a></td><td class="n">%d</td><td>%s</td></tr>`,
				html.EscapeString(a.URL), html.EscapeString(a.Path), a.Size, html.EscapeString(a.ContentType))
		}
		b.WriteString("</tbody></table>")
	}
	if v.Truncated {
		b.WriteString("<p>The folder holds more files than one listing names.</p>")
	}
	b.WriteString("</body></html>\n")
	return b.String()
}

// getArtifact serves a file of a live sandbox's artifacts folder.
func (s *server) getArtifact(w http.ResponseWriter, r *http.Request, c *call) error {
	d, err := s.artifactsAccess(w, r, c)
	if err != nil {
		return err
	}
	err = s.opts.Sandboxes.Artifact(r.Context(), d, r.PathValue("path"), func(ct string, size int64) io.Writer {
		artifactHeaders(w.Header(), ct, size)
		return w
	})
	if err != nil && !c.rec.wroteHeader {
		return directError(c, err)
	}
	if err != nil {
		c.cause = err
	}
	return nil
}
