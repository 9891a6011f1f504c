package fakesecrets_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/aws/aws-sdk-go-v2/service/ssm"
	"github.com/aws/smithy-go"

	"github.com/sandstep/sandstep/internal/service/awsenv"
	"github.com/sandstep/sandstep/internal/testkit/fakesecrets"
)

// wireCall is what identifies a JSON 1.1 request on the wire.
type wireCall struct {
	Method, Path, ContentType, Target, Scope string
	Body                                     map[string]any
}

// recorder sits in front of the fake and keeps each request's wire form.
type recorder struct {
	mu    sync.Mutex
	calls []wireCall
	next  http.Handler
}

func (r *recorder) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	raw, _ := io.ReadAll(req.Body)
	var body map[string]any
	_ = json.Unmarshal(raw, &body)
	// The credential scope without the key id and date: the service and
	// region the request was signed for.
	auth := req.Header.Get("Authorization")
	scope := ""
	if i := strings.Index(auth, "Credential="); i >= 0 {
		parts := strings.Split(strings.SplitN(auth[i+len("Credential="):], ",", 2)[0], "/")
		scope = strings.Join(parts[2:], "/")
	}
	r.mu.Lock()
	r.calls = append(r.calls, wireCall{req.Method, req.URL.Path, req.Header.Get("Content-Type"), req.Header.Get("X-Amz-Target"), scope, body})
	r.mu.Unlock()
	req.Body = io.NopCloser(bytes.NewReader(raw))
	r.next.ServeHTTP(w, req)
}

func (r *recorder) take() []wireCall {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.calls
	r.calls = nil
	return c
}

// The hand-written calls (awsenv.Client, which the Lambdas use to stay in
// their size budget) put on the wire exactly what the SDK's own clients
// do, call by call, and read the same answers and errors from the fake
// the SDK clients judge (TestSDKClientsAgree): a string secret whole, by
// ARN and at AWSPREVIOUS, a binary secret, a SecureString parameter, and
// each store's not-found error.
func TestHandWrittenCallsMatchTheSDK(t *testing.T) {
	f := fakesecrets.New()
	t.Cleanup(f.Close)
	rec := &recorder{next: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		req, _ := http.NewRequestWithContext(r.Context(), r.Method, f.URL+r.URL.Path, r.Body)
		req.Header = r.Header.Clone()
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer res.Body.Close()
		for k, v := range res.Header {
			w.Header()[k] = v
		}
		w.WriteHeader(res.StatusCode)
		_, _ = io.Copy(w, res.Body)
	})}
	proxy := httptest.NewServer(rec)
	t.Cleanup(proxy.Close)

	arn := f.PutSecret("sandstep/sandy", "k-old")
	f.PutSecret("sandstep/sandy", "k-new")
	f.PutSecretBinary("sandstep/cert", []byte{0, 1, 2, 0xff})
	f.PutParameter("/sandstep/key", "SecureString", "k-param")

	ctx := context.Background()
	creds := credentials.NewStaticCredentialsProvider("AKIDFAKE", "secret", "")
	sdkSM := secretsmanager.New(secretsmanager.Options{Region: fakesecrets.Region, Credentials: creds, BaseEndpoint: aws.String(proxy.URL)})
	sdkSSM := ssm.New(ssm.Options{Region: fakesecrets.Region, Credentials: creds, BaseEndpoint: aws.String(proxy.URL)})
	ownSM := &awsenv.Client{Service: awsenv.SecretsManager, Region: fakesecrets.Region, Credentials: creds, Endpoint: proxy.URL}
	ownSSM := &awsenv.Client{Service: awsenv.SSM, Region: fakesecrets.Region, Credentials: creds, Endpoint: proxy.URL}

	for _, c := range []struct {
		name       string
		sdk, own   func() answer
		wantString string
	}{
		{"secret by name", func() answer {
			out, err := sdkSM.GetSecretValue(ctx, &secretsmanager.GetSecretValueInput{SecretId: aws.String("sandstep/sandy")})
			return sdkSecret(out, err)
		}, func() answer {
			v, err := ownSM.GetSecretValue(ctx, "sandstep/sandy", "")
			return ownSecret(v, err)
		}, "k-new"},
		{"secret by ARN at AWSPREVIOUS", func() answer {
			out, err := sdkSM.GetSecretValue(ctx, &secretsmanager.GetSecretValueInput{SecretId: aws.String(arn), VersionStage: aws.String("AWSPREVIOUS")})
			return sdkSecret(out, err)
		}, func() answer {
			v, err := ownSM.GetSecretValue(ctx, arn, "AWSPREVIOUS")
			return ownSecret(v, err)
		}, "k-old"},
		{"binary secret", func() answer {
			out, err := sdkSM.GetSecretValue(ctx, &secretsmanager.GetSecretValueInput{SecretId: aws.String("sandstep/cert")})
			return sdkSecret(out, err)
		}, func() answer {
			v, err := ownSM.GetSecretValue(ctx, "sandstep/cert", "")
			return ownSecret(v, err)
		}, ""},
		{"absent secret", func() answer {
			out, err := sdkSM.GetSecretValue(ctx, &secretsmanager.GetSecretValueInput{SecretId: aws.String("sandstep/none")})
			return sdkSecret(out, err)
		}, func() answer {
			v, err := ownSM.GetSecretValue(ctx, "sandstep/none", "")
			return ownSecret(v, err)
		}, ""},
		{"parameter", func() answer {
			out, err := sdkSSM.GetParameter(ctx, &ssm.GetParameterInput{Name: aws.String("/sandstep/key"), WithDecryption: aws.Bool(true)})
			if err != nil {
				return answer{Error: errorCode(err)}
			}
			return answer{String: aws.ToString(out.Parameter.Value)}
		}, func() answer {
			v, err := ownSSM.GetParameter(ctx, "/sandstep/key")
			return answer{String: v, Error: awsenv.ErrorCode(err)}
		}, "k-param"},
		{"absent parameter", func() answer {
			_, err := sdkSSM.GetParameter(ctx, &ssm.GetParameterInput{Name: aws.String("/sandstep/none"), WithDecryption: aws.Bool(true)})
			return answer{Error: errorCode(err)}
		}, func() answer {
			_, err := ownSSM.GetParameter(ctx, "/sandstep/none")
			return answer{Error: awsenv.ErrorCode(err)}
		}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			rec.take()
			want := c.sdk()
			sdkWire := rec.take()
			got := c.own()
			ownWire := rec.take()
			if len(sdkWire) != 1 || len(ownWire) != 1 {
				t.Fatalf("requests: SDK %d, own %d; want one each", len(sdkWire), len(ownWire))
			}
			if !reflect.DeepEqual(sdkWire[0], ownWire[0]) {
				t.Fatalf("on the wire:\nSDK %+v\nown %+v", sdkWire[0], ownWire[0])
			}
			if got != want {
				t.Fatalf("answers: SDK %+v, own %+v", want, got)
			}
			if want.String != c.wantString {
				t.Fatalf("the SDK read %q, want %q", want.String, c.wantString)
			}
		})
	}
}

func sdkSecret(out *secretsmanager.GetSecretValueOutput, err error) answer {
	if err != nil {
		return answer{Error: errorCode(err)}
	}
	return answer{String: aws.ToString(out.SecretString), Binary: string(out.SecretBinary), Version: aws.ToString(out.VersionId)}
}

func ownSecret(v awsenv.SecretValue, err error) answer {
	if err != nil {
		return answer{Error: awsenv.ErrorCode(err)}
	}
	return answer{String: v.String, Binary: string(v.Binary), Version: v.VersionID}
}

// answer is what a reader gets from either client.
type answer struct{ String, Binary, Version, Error string }

// errorCode is the SDK's error code of err.
func errorCode(err error) string {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return ae.ErrorCode()
	}
	if err != nil {
		return err.Error()
	}
	return ""
}
