// Package urlnorm puts URLs in the one normal form that discovery and the
// crawler share, so that both deduplicate the same way.
package urlnorm

import (
	"fmt"
	"net"
	"net/url"
	"path"
	"strings"
)

// trackingParams are query parameters that only say where a visitor came
// from; two URLs that differ only in them are the same page.
var trackingParams = map[string]bool{
	"gclid": true, "dclid": true, "fbclid": true, "msclkid": true, "yclid": true,
	"mc_cid": true, "mc_eid": true, "_ga": true, "_gl": true, "igshid": true,
	"ref_src": true, "ref_url": true,
}

// Normalize returns the form of raw that the crawler fetches: an absolute
// http(s) URL with a lowercase scheme and host, no default port, no fragment,
// no tracking parameters (utm_*, gclid, fbclid...), the remaining query sorted
// by key, dot segments resolved and an empty path made "/". The path keeps its
// trailing slash, because servers may answer "/docs" and "/docs/" differently;
// Key removes it for deduplication.
func Normalize(raw string) (string, error) {
	u, err := url.Parse(strings.TrimSpace(raw))
	if err != nil {
		return "", fmt.Errorf("parse url: %w", err)
	}
	u.Scheme = strings.ToLower(u.Scheme)
	if u.Scheme != "http" && u.Scheme != "https" {
		return "", fmt.Errorf("url %q: scheme %q is not http or https", raw, u.Scheme)
	}
	if u.Host == "" {
		return "", fmt.Errorf("url %q has no host", raw)
	}
	u.User = nil
	u.Fragment, u.RawFragment = "", ""
	host := strings.ToLower(u.Hostname())
	port := u.Port()
	if (u.Scheme == "http" && port == "80") || (u.Scheme == "https" && port == "443") {
		port = ""
	}
	host = strings.TrimSuffix(host, ".")
	if port != "" {
		u.Host = net.JoinHostPort(host, port)
	} else if strings.Contains(host, ":") {
		u.Host = "[" + host + "]"
	} else {
		u.Host = host
	}

	if u.Path == "" {
		u.Path, u.RawPath = "/", ""
	} else {
		trailing := strings.HasSuffix(u.Path, "/")
		clean := path.Clean("/" + u.Path)
		if trailing && clean != "/" {
			clean += "/"
		}
		if clean != u.Path {
			u.Path, u.RawPath = clean, ""
		}
	}

	if u.RawQuery != "" {
		// A query that does not parse (a stray "%", a ";") is kept as it is:
		// the server may still understand it.
		if q, err := url.ParseQuery(u.RawQuery); err == nil {
			for k := range q {
				if trackingParams[strings.ToLower(k)] || strings.HasPrefix(strings.ToLower(k), "utm_") {
					delete(q, k)
				}
			}
			u.RawQuery = q.Encode() // Encode sorts by key
		}
	}
	u.ForceQuery = false
	return u.String(), nil
}

// Key is the deduplication key of a URL that Normalize returned: the same URL
// without the trailing slash of a non-root path, so that "/docs" and "/docs/"
// are crawled once.
func Key(normalized string) string {
	u, err := url.Parse(normalized)
	if err != nil {
		return normalized
	}
	if len(u.Path) > 1 && strings.HasSuffix(u.Path, "/") {
		u.Path = strings.TrimRight(u.Path, "/")
		if u.Path == "" {
			u.Path = "/"
		}
		u.RawPath = ""
	}
	return u.String()
}
