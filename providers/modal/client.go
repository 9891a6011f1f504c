package modal

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	pb "github.com/modal-labs/modal-client/go/proto/modal_proto"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sandstep/sandstep/internal/service/version"
	"github.com/sandstep/sandstep/providers"
)

// client is a thin client over Modal's generated gRPC stubs: the control
// plane with its token headers, short-lived auth token and retries, and a
// connection per command router address.
type client struct {
	s        Settings
	cp       pb.ModalClientClient
	conn     *grpc.ClientConn
	host     string // the server's host name, sent as x-modal-host
	plain    bool   // the server is a loopback fake speaking plaintext
	tokenID  string
	secret   string
	log      *slog.Logger
	dialOpts []grpc.DialOption

	authMu  sync.Mutex
	auth    string
	authExp time.Time

	routerMu sync.Mutex
	routers  map[string]*grpc.ClientConn // by host:port
}

// sdkVersion is the Modal Go SDK whose behaviour the client copies; the
// server keys features on it.
const sdkVersion = "0.11.1"

func newClient(s Settings, tokenID, secret string, log *slog.Logger) (*client, error) {
	u, err := url.Parse(s.ServerURL)
	if err != nil {
		return nil, err
	}
	port := u.Port()
	if port == "" {
		port = "443"
		if u.Scheme == "http" {
			port = "80"
		}
	}
	c := &client{s: s, host: u.Hostname(), plain: u.Scheme == "http", tokenID: tokenID, secret: secret, log: log, routers: map[string]*grpc.ClientConn{}}
	creds := credentials.NewTLS(&tls.Config{MinVersion: tls.VersionTLS12})
	if c.plain {
		creds = insecure.NewCredentials()
	}
	c.dialOpts = []grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 30 * time.Second, Timeout: 10 * time.Second, PermitWithoutStream: true}),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(100<<20), grpc.MaxCallSendMsgSize(100<<20)),
		grpc.WithInitialWindowSize(64 << 20), grpc.WithInitialConnWindowSize(64 << 20),
	}
	conn, err := grpc.NewClient(u.Hostname()+":"+port, append(c.dialOpts, grpc.WithChainUnaryInterceptor(c.intercept))...)
	if err != nil {
		return nil, err
	}
	c.conn, c.cp = conn, pb.NewModalClientClient(conn)
	return c, nil
}

func (c *client) close() {
	_ = c.conn.Close()
	c.routerMu.Lock()
	defer c.routerMu.Unlock()
	for k, r := range c.routers {
		_ = r.Close()
		delete(c.routers, k)
	}
}

// intercept adds the headers Modal's clients send: the token pair, the
// client identity, and the short-lived auth token on every call but the
// one that fetches it.
func (c *client) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	ctx = metadata.AppendToOutgoingContext(ctx,
		"x-modal-client-type", strconv.Itoa(int(pb.ClientType_CLIENT_TYPE_LIBMODAL_GO)),
		"x-modal-client-version", "1.0.0",
		"x-modal-libmodal-version", "modal-go/"+sdkVersion+" sandstep/"+version.Version,
		"x-modal-token-id", c.tokenID,
		"x-modal-token-secret", c.secret,
		"x-modal-host", c.host)
	if method != "/modal.client.ModalClient/AuthTokenGet" {
		tok, err := c.authToken(ctx)
		if err != nil {
			return err
		}
		ctx = metadata.AppendToOutgoingContext(ctx, "x-modal-auth-token", tok)
	}
	return invoker(ctx, method, req, reply, cc, opts...)
}

// authToken returns a token that is not past half its life, fetching one
// when needed (Modal's clients refresh at 50-60 % of the lifetime).
func (c *client) authToken(ctx context.Context) (string, error) {
	c.authMu.Lock()
	defer c.authMu.Unlock()
	if c.auth != "" && time.Now().Before(c.authExp) {
		return c.auth, nil
	}
	ctx, cancel := context.WithTimeout(ctx, c.s.RequestTimeout.D())
	defer cancel()
	resp, err := c.cp.AuthTokenGet(ctx, &pb.AuthTokenGetRequest{})
	if err != nil {
		return "", err
	}
	tok := resp.GetToken()
	if tok == "" {
		return "", status.Error(codes.Internal, "AuthTokenGet answered no token")
	}
	life := 20 * time.Minute
	if exp, ok := jwtExpiry(tok); ok {
		life = time.Until(exp)
	}
	c.auth, c.authExp = tok, time.Now().Add(life/2)
	return tok, nil
}

// forgetAuth drops the auth token after the server refused it.
func (c *client) forgetAuth() {
	c.authMu.Lock()
	c.auth = ""
	c.authMu.Unlock()
}

// jwtExpiry reads the exp claim of a JWT without checking it: the server
// does that.
func jwtExpiry(tok string) (time.Time, bool) {
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		return time.Time{}, false
	}
	raw, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(parts[1], "="))
	if err != nil {
		return time.Time{}, false
	}
	var claims struct {
		Exp json.Number `json:"exp"`
	}
	if json.Unmarshal(raw, &claims) != nil {
		return time.Time{}, false
	}
	n, err := claims.Exp.Float64()
	if err != nil || n <= 0 {
		return time.Time{}, false
	}
	return time.Unix(int64(n), 0), true
}

// call runs one RPC with retries: transient codes with exponential backoff
// and jitter, Unauthenticated once after dropping the auth token, and
// RESOURCE_EXHAUSTED where the server says when to come back (Modal's rate
// limit), within max_throttle_wait. Every attempt carries the same
// idempotency key, as Modal's clients send.
func call[T any](ctx context.Context, c *client, op string, fn func(context.Context) (T, error)) (T, error) {
	key := randomHex(16)
	var (
		zero      T
		throttled time.Duration
		reauthed  bool
		transient int // failures that count against max_retries
	)
	for attempt := 0; ; attempt++ {
		actx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(ctx,
			"x-idempotency-key", key, "x-retry-attempt", strconv.Itoa(attempt)), c.s.RequestTimeout.D())
		v, err := fn(actx)
		cancel()
		if err == nil {
			return v, nil
		}
		if ctx.Err() != nil {
			return zero, providers.Wrap(providers.DeadlineExceeded, op, ctx.Err())
		}
		st := status.Convert(err)
		var wait time.Duration
		switch st.Code() {
		case codes.Unauthenticated:
			if reauthed || strings.Contains(st.Message(), "Token ID or secret") {
				return zero, mapError(op, err)
			}
			reauthed = true
			c.forgetAuth()
			continue
		case codes.ResourceExhausted:
			after, ok := retryAfter(st)
			if !ok || throttled+after > c.s.MaxThrottleWait.D() {
				return zero, mapError(op, err)
			}
			throttled += after
			wait = after
			c.log.Debug("modal throttled a call", "op", op, "retry_after", after)
		case codes.Unavailable, codes.DeadlineExceeded, codes.Internal, codes.Unknown:
			// Throttled attempts wait as the server says and do not count.
			if transient >= c.s.MaxRetries {
				return zero, mapError(op, err)
			}
			base := c.s.RetryBaseDelay.D() << transient
			transient++
			wait = base/2 + jitter(base/2)
			c.log.Debug("retrying a modal call", "op", op, "attempt", attempt+1, "code", st.Code().String())
		default:
			return zero, mapError(op, err)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return zero, providers.Wrap(providers.DeadlineExceeded, op, ctx.Err())
		case <-t.C:
		}
	}
}

// retryAfter reads Modal's RPCRetryPolicy from a status's details.
func retryAfter(st *status.Status) (time.Duration, bool) {
	for _, d := range st.Details() {
		if p, ok := d.(*pb.RPCRetryPolicy); ok {
			return max(time.Duration(float64(p.GetRetryAfterSecs())*float64(time.Second)), 10*time.Millisecond), true
		}
	}
	return 0, false
}

// credential matches what may never leave the plugin in a message: Modal
// token ids and secrets (ak-..., as-...), JWTs (the auth and command
// router tokens), and the value of any credential header a server or proxy
// echoes back ("x-modal-token-secret: ...", "authorization=Bearer ...").
var credential = regexp.MustCompile(`(?i)((x-modal-token-id|x-modal-token-secret|x-modal-auth-token|authorization)["']?\s*[:=]\s*["']?(bearer\s+)?)[^\s"',;]+|\b(ak|as)-[A-Za-z0-9_-]{4,}|eyJ[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*`)

// redact removes credentials from a server's message.
func redact(msg string) string {
	return credential.ReplaceAllStringFunc(msg, func(m string) string {
		if sub := credential.FindStringSubmatch(m); sub[1] != "" {
			return sub[1] + "[redacted]"
		}
		return "[redacted]"
	})
}

// mapError turns a gRPC status into a provider error with Modal's meaning
// of each code (the Python client's mapping). The message is the server's,
// with anything shaped like a credential taken out: the token travels in
// headers only, but a server or proxy that echoes headers in an error
// must not carry it into logs, events or reports.
func mapError(op string, err error) error {
	if err == nil {
		return nil
	}
	var pe *providers.Error
	if errors.As(err, &pe) {
		return err
	}
	st, ok := status.FromError(err)
	if !ok {
		return providers.Errorf(providers.Unavailable, op, "%s", redact(err.Error()))
	}
	code := providers.Unknown
	switch st.Code() {
	case codes.NotFound:
		code = providers.NotFound
	case codes.AlreadyExists:
		code = providers.AlreadyExists
	case codes.FailedPrecondition, codes.Aborted:
		code = providers.FailedPrecondition
	case codes.InvalidArgument, codes.OutOfRange:
		code = providers.InvalidArgument
	case codes.ResourceExhausted:
		code = providers.ResourceExhausted
	case codes.Unauthenticated, codes.PermissionDenied:
		code = providers.PermissionDenied
	case codes.Unavailable, codes.Unknown:
		code = providers.Unavailable
	case codes.Canceled, codes.DeadlineExceeded:
		code = providers.DeadlineExceeded
	case codes.Internal:
		code = providers.Internal
	case codes.Unimplemented:
		code = providers.Unsupported
	}
	return &providers.Error{Code: code, Op: op, Message: "modal: " + st.Code().String() + ": " + redact(st.Message())}
}

// router returns a TaskCommandRouter client for a sandbox's router
// address. Modal hands out https URLs; against a loopback fake the
// connection is plaintext, as Modal's own clients do.
func (c *client) router(rawURL string) (pb.TaskCommandRouterClient, error) {
	u, err := url.Parse(rawURL)
	if err != nil || u.Scheme != "https" || u.Hostname() == "" {
		return nil, fmt.Errorf("the command router URL %q is not an https URL", rawURL)
	}
	port := u.Port()
	if port == "" {
		port = "443"
	}
	target := u.Hostname() + ":" + port
	c.routerMu.Lock()
	defer c.routerMu.Unlock()
	if conn := c.routers[target]; conn != nil {
		return pb.NewTaskCommandRouterClient(conn), nil
	}
	opts := c.dialOpts
	if !c.plain {
		opts = append(opts[:len(opts):len(opts)], grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{MinVersion: tls.VersionTLS12})))
	}
	conn, err := grpc.NewClient(target, opts...)
	if err != nil {
		return nil, err
	}
	c.routers[target] = conn
	return pb.NewTaskCommandRouterClient(conn), nil
}

func jitter(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	n, _ := rand.Int(rand.Reader, big.NewInt(int64(d)))
	return time.Duration(n.Int64())
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func itoa(n int) string { return strconv.Itoa(n) }
