package awsenv

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
)

// Client sends SigV4-signed JSON requests to one AWS service.
type Client struct {
	Service     Service
	Region      string
	Credentials aws.CredentialsProvider
	// Endpoint is the service's base URL (see Env.Endpoint).
	Endpoint string
	// HTTP defaults to a client with a 10 s timeout.
	HTTP *http.Client
}

// NewClient returns a Client for s in e's region, with e's credentials and
// endpoint.
func (e Env) NewClient(s Service) *Client {
	return &Client{Service: s, Region: e.Region, Credentials: e.Credentials, Endpoint: e.Endpoint(s)}
}

// APIError is an error answer of an AWS API.
type APIError struct {
	Status int
	// Code is the error's type without its namespace
	// ("ExecutionAlreadyExists", "AccessDeniedException").
	Code    string
	Message string
}

func (e *APIError) Error() string {
	if e.Message == "" {
		return fmt.Sprintf("%d %s", e.Status, e.Code)
	}
	return fmt.Sprintf("%d %s: %s", e.Status, e.Code, e.Message)
}

// ErrorCode returns the AWS error code of err ("" if err is no APIError).
func ErrorCode(err error) string {
	var ae *APIError
	if errors.As(err, &ae) {
		return ae.Code
	}
	return ""
}

// Request is one call.
type Request struct {
	// Path is appended to the endpoint ("/" for the JSON protocols).
	Path string
	// Header holds the protocol's headers (X-Amz-Target, Content-Type...).
	Header http.Header
	// Body is marshalled as JSON.
	Body any
	// OK is the status of success; 0 means any 2xx.
	OK int
}

// Do sends r and decodes a successful answer's JSON into out (nil: the
// answer is read and dropped). Failures are *APIError when AWS answered.
// Neither the credentials nor the signature ever appear in an error.
func (c *Client) Do(ctx context.Context, r Request, out any) error {
	if c.Region == "" || c.Credentials == nil || c.Endpoint == "" {
		return fmt.Errorf("%s: region, credentials and endpoint are required", c.Service.SigningName)
	}
	body, err := json.Marshal(r.Body)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(c.Endpoint, "/")+r.Path, bytes.NewReader(body))
	if err != nil {
		return err
	}
	for k, vs := range r.Header {
		req.Header[k] = vs
	}
	creds, err := c.Credentials.Retrieve(ctx)
	if err != nil {
		return fmt.Errorf("%s: credentials: %w", c.Service.SigningName, err)
	}
	sum := sha256.Sum256(body)
	if err := v4.NewSigner().SignHTTP(ctx, creds, req, hex.EncodeToString(sum[:]), c.Service.SigningName, c.Region, time.Now()); err != nil {
		return fmt.Errorf("%s: sign: %w", c.Service.SigningName, err)
	}
	hc := c.HTTP
	if hc == nil {
		hc = defaultHTTP
	}
	res, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	ok := res.StatusCode/100 == 2
	if r.OK != 0 {
		ok = res.StatusCode == r.OK
	}
	if !ok {
		return apiError(res)
	}
	if out == nil {
		_, err := io.Copy(io.Discard, io.LimitReader(res.Body, 1<<20))
		return err
	}
	if err := json.NewDecoder(io.LimitReader(res.Body, 8<<20)).Decode(out); err != nil {
		return fmt.Errorf("%s: decode answer: %w", c.Service.SigningName, err)
	}
	return nil
}

var defaultHTTP = &http.Client{Timeout: 10 * time.Second}

// apiError reads AWS's error answer: the type is in X-Amzn-ErrorType or
// the body's __type (either may carry a namespace, "ns#Code", and a
// trailing ":uri"), the message in message or Message.
func apiError(res *http.Response) error {
	raw, _ := io.ReadAll(io.LimitReader(res.Body, 4<<10))
	var body struct {
		Type     string `json:"__type"`
		Message  string `json:"message"`
		Message2 string `json:"Message"`
	}
	_ = json.Unmarshal(raw, &body)
	code := res.Header.Get("X-Amzn-ErrorType")
	if code == "" {
		code = body.Type
	}
	if i := strings.LastIndexByte(code, '#'); i >= 0 {
		code = code[i+1:]
	}
	if i := strings.IndexByte(code, ':'); i >= 0 {
		code = code[:i]
	}
	msg := body.Message
	if msg == "" {
		msg = body.Message2
	}
	if code == "" && msg == "" {
		msg = strings.TrimSpace(string(raw))
	}
	if code == "" {
		code = http.StatusText(res.StatusCode)
	}
	return &APIError{Status: res.StatusCode, Code: code, Message: msg}
}
