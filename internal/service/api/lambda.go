package api

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"unicode/utf8"

	"github.com/aws/aws-lambda-go/events"
)

// LambdaHandler adapts h to API Gateway HTTP API events (payload format
// 2.0), so that the Lambda serves the very handler the local server does.
// Responses are buffered whole: leave Options.Streaming off for it.
func LambdaHandler(h http.Handler) func(context.Context, events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
	return func(ctx context.Context, ev events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
		w := &bufferedWriter{header: make(http.Header)}
		r, err := lambdaRequest(ctx, ev)
		if err != nil {
			writeError(w, invalid("", "%v", err))
			return w.response(false), nil
		}
		h.ServeHTTP(w, r)
		return w.response(r.Method == http.MethodHead), nil
	}
}

// lambdaRequest rebuilds the request API Gateway received.
func lambdaRequest(ctx context.Context, ev events.APIGatewayV2HTTPRequest) (*http.Request, error) {
	path := ev.RawPath
	if path == "" {
		path = ev.RequestContext.HTTP.Path
	}
	// On a named stage the path starts with the stage; routes do not.
	if st := ev.RequestContext.Stage; st != "" && st != "$default" {
		if path == "/"+st {
			path = "/"
		} else if rest, ok := strings.CutPrefix(path, "/"+st+"/"); ok {
			path = "/" + rest
		}
	}
	if path == "" {
		path = "/"
	}
	uri := path
	if ev.RawQueryString != "" {
		uri += "?" + ev.RawQueryString
	}
	u, err := url.ParseRequestURI(uri)
	if err != nil {
		return nil, fmt.Errorf("the request path cannot be parsed: %w", err)
	}
	body := []byte(ev.Body)
	if ev.IsBase64Encoded {
		if body, err = base64.StdEncoding.DecodeString(ev.Body); err != nil {
			return nil, fmt.Errorf("the request body is not valid base64: %w", err)
		}
	}
	method := ev.RequestContext.HTTP.Method
	if method == "" {
		method = http.MethodGet
	}
	r, err := http.NewRequestWithContext(ctx, method, uri, bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("the request cannot be rebuilt: %w", err)
	}
	r.URL = u
	r.RequestURI = uri
	r.ContentLength = int64(len(body))
	if len(body) == 0 {
		r.Body = http.NoBody
	}
	// API Gateway has already joined repeated headers with commas.
	for k, v := range ev.Headers {
		r.Header.Add(k, v)
	}
	if len(ev.Cookies) > 0 {
		r.Header.Set("Cookie", strings.Join(ev.Cookies, "; "))
	}
	r.Host = r.Header.Get("Host")
	if r.Host == "" {
		r.Host = ev.RequestContext.DomainName
	}
	if ip := ev.RequestContext.HTTP.SourceIP; ip != "" {
		r.RemoteAddr = net.JoinHostPort(ip, "0")
	}
	if p := ev.RequestContext.HTTP.Protocol; p != "" {
		if major, minor, ok := http.ParseHTTPVersion(p); ok {
			r.Proto, r.ProtoMajor, r.ProtoMinor = p, major, minor
		}
	}
	return r, nil
}

// bufferedWriter collects a response for API Gateway. It cannot flush, so
// a handler that tries to stream learns that it may not.
type bufferedWriter struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (w *bufferedWriter) Header() http.Header { return w.header }

func (w *bufferedWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
}

func (w *bufferedWriter) Write(b []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	return w.body.Write(b)
}

func (w *bufferedWriter) response(head bool) events.APIGatewayV2HTTPResponse {
	res := events.APIGatewayV2HTTPResponse{StatusCode: w.status, Headers: make(map[string]string, len(w.header))}
	if res.StatusCode == 0 {
		res.StatusCode = http.StatusOK
	}
	for k, vs := range w.header {
		if k == "Set-Cookie" {
			res.Cookies = append(res.Cookies, vs...)
			continue
		}
		res.Headers[k] = strings.Join(vs, ", ")
	}
	switch b := w.body.Bytes(); {
	case head:
	case utf8.Valid(b):
		res.Body = string(b)
	default:
		res.Body = base64.StdEncoding.EncodeToString(b)
		res.IsBase64Encoded = true
	}
	return res
}
