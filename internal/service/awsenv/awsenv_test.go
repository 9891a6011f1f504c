package awsenv_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/sandstep/sandstep/internal/service/awsenv"
)

func envOf(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

// The precedence the AWS SDKs document: a service's own variable over
// AWS_ENDPOINT_URL over the regional endpoint, and
// AWS_IGNORE_CONFIGURED_ENDPOINT_URLS=true switching both variables off.
func TestEndpointPrecedence(t *testing.T) {
	for _, c := range []struct {
		name string
		env  map[string]string
		svc  awsenv.Service
		want string
	}{
		{"none", map[string]string{"AWS_REGION": "eu-west-1"}, awsenv.DynamoDB, "https://dynamodb.eu-west-1.amazonaws.com"},
		{"default region", map[string]string{"AWS_DEFAULT_REGION": "us-west-2"}, awsenv.StepFunctions, "https://states.us-west-2.amazonaws.com"},
		{"AWS_REGION first", map[string]string{"AWS_REGION": "eu-west-1", "AWS_DEFAULT_REGION": "us-west-2"}, awsenv.Lambda, "https://lambda.eu-west-1.amazonaws.com"},
		{"china", map[string]string{"AWS_REGION": "cn-north-1"}, awsenv.Lambda, "https://lambda.cn-north-1.amazonaws.com.cn"},
		{"global", map[string]string{"AWS_REGION": "eu-west-1", "AWS_ENDPOINT_URL": "http://127.0.0.1:4566"}, awsenv.StepFunctions, "http://127.0.0.1:4566"},
		{"service over global", map[string]string{"AWS_ENDPOINT_URL": "http://127.0.0.1:4566", "AWS_ENDPOINT_URL_DYNAMODB": "http://127.0.0.1:8000"}, awsenv.DynamoDB, "http://127.0.0.1:8000"},
		{"other service's variable", map[string]string{"AWS_REGION": "eu-west-1", "AWS_ENDPOINT_URL_DYNAMODB": "http://127.0.0.1:8000"}, awsenv.StepFunctions, "https://states.eu-west-1.amazonaws.com"},
		{"sfn", map[string]string{"AWS_ENDPOINT_URL_SFN": "http://127.0.0.1:8083"}, awsenv.StepFunctions, "http://127.0.0.1:8083"},
		{"lambda", map[string]string{"AWS_ENDPOINT_URL_LAMBDA": "http://127.0.0.1:3001"}, awsenv.Lambda, "http://127.0.0.1:3001"},
		{"ignored", map[string]string{"AWS_REGION": "eu-west-1", "AWS_ENDPOINT_URL": "http://127.0.0.1:4566", "AWS_ENDPOINT_URL_SFN": "http://127.0.0.1:8083", "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS": "TRUE"}, awsenv.StepFunctions, "https://states.eu-west-1.amazonaws.com"},
		{"not ignored", map[string]string{"AWS_ENDPOINT_URL": "http://127.0.0.1:4566", "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS": "false"}, awsenv.DynamoDB, "http://127.0.0.1:4566"},
	} {
		if got := awsenv.FromEnv(envOf(c.env)).Endpoint(c.svc); got != c.want {
			t.Errorf("%s: endpoint of %s = %q, want %q", c.name, c.svc.EnvID, got, c.want)
		}
	}
}

// The DynamoDB client really dials the configured endpoint, signed with the
// environment's credentials for its region.
func TestDynamoDBClientDialsTheConfiguredEndpoint(t *testing.T) {
	var auth, target string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		auth, target = r.Header.Get("Authorization"), r.Header.Get("X-Amz-Target")
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		_, _ = w.Write([]byte(`{"TableNames":["t1"]}`))
	}))
	defer srv.Close()
	env := awsenv.FromEnv(envOf(map[string]string{
		"AWS_REGION": "eu-central-1", "AWS_ACCESS_KEY_ID": "AKIDEXAMPLE", "AWS_SECRET_ACCESS_KEY": "not-in-logs",
		"AWS_ENDPOINT_URL": "http://127.0.0.1:1", "AWS_ENDPOINT_URL_DYNAMODB": srv.URL,
	}))
	out, err := env.DynamoDB().ListTables(context.Background(), &dynamodb.ListTablesInput{})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.TableNames) != 1 || out.TableNames[0] != "t1" {
		t.Fatalf("tables = %v", out.TableNames)
	}
	if target != "DynamoDB_20120810.ListTables" || !strings.HasPrefix(auth, "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/") ||
		!strings.Contains(auth, "/eu-central-1/dynamodb/aws4_request") {
		t.Fatalf("target %q, authorization %q", target, auth)
	}
}

func TestClientErrors(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/header":
			w.Header().Set("X-Amzn-ErrorType", "AccessDeniedException:http://internal.amazon.com/coral/com.amazon.coral.service/")
			w.WriteHeader(http.StatusForbidden)
			_, _ = w.Write([]byte(`{"Message":"not allowed"}`))
		case "/body":
			w.WriteHeader(http.StatusBadRequest)
			_, _ = w.Write([]byte(`{"__type":"com.amazonaws.swf.service.model.v20120810#ExecutionAlreadyExists","message":"exists"}`))
		case "/ok":
			var in map[string]string
			_ = json.NewDecoder(r.Body).Decode(&in)
			_ = json.NewEncoder(w).Encode(map[string]string{"echo": in["q"]})
		}
	}))
	defer srv.Close()
	c := awsenv.FromEnv(envOf(map[string]string{"AWS_REGION": "us-east-1", "AWS_ACCESS_KEY_ID": "AKID", "AWS_SECRET_ACCESS_KEY": "very-secret", "AWS_ENDPOINT_URL": srv.URL})).NewClient(awsenv.StepFunctions)
	ctx := context.Background()

	err := c.Do(ctx, awsenv.Request{Path: "/header", Body: map[string]string{}}, nil)
	var ae *awsenv.APIError
	if !errors.As(err, &ae) || ae.Code != "AccessDeniedException" || ae.Message != "not allowed" || ae.Status != 403 {
		t.Fatalf("header error = %#v", err)
	}
	if err := c.Do(ctx, awsenv.Request{Path: "/body", Body: map[string]string{}}, nil); awsenv.ErrorCode(err) != "ExecutionAlreadyExists" {
		t.Fatalf("body error = %v", err)
	}
	if strings.Contains(err.Error(), "very-secret") {
		t.Fatalf("the secret key is in an error: %v", err)
	}
	var out struct{ Echo string }
	if err := c.Do(ctx, awsenv.Request{Path: "/ok", Body: map[string]string{"q": "x"}}, &out); err != nil || out.Echo != "x" {
		t.Fatalf("ok = %+v, %v", out, err)
	}
	// A status other than the one the call succeeds with is an error.
	if err := c.Do(ctx, awsenv.Request{Path: "/ok", Body: map[string]string{}, OK: http.StatusAccepted}, nil); err == nil {
		t.Fatal("a 200 where 202 is wanted passed")
	}
}

func TestRedact(t *testing.T) {
	if got := awsenv.Redact("https://user:pass@localstack.example:4566/path?X-Amz-Security-Token=tok"); got != "https://localstack.example:4566/path" {
		t.Fatalf("redacted = %q", got)
	}
}
