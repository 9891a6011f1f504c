package awsenv_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sandstep/sandstep/internal/service/awsenv"
)

// fakeStore answers Secrets Manager's GetSecretValue and SSM's GetParameter
// as AWS documents them (JSON 1.1, the operation in X-Amz-Target), and
// records what each request was signed for.
func fakeStore(t *testing.T) (*httptest.Server, *[]string) {
	var scopes []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		auth := r.Header.Get("Authorization")
		if i := strings.Index(auth, "Credential="); i >= 0 {
			scopes = append(scopes, strings.SplitN(auth[i+len("Credential="):], ",", 2)[0])
		}
		if r.Method != http.MethodPost || r.URL.Path != "/" || r.Header.Get("Content-Type") != "application/x-amz-json-1.1" {
			t.Errorf("%s %s %s", r.Method, r.URL.Path, r.Header.Get("Content-Type"))
		}
		var in map[string]any
		if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
			t.Error(err)
		}
		w.Header().Set("Content-Type", "application/x-amz-json-1.1")
		switch target := r.Header.Get("X-Amz-Target"); {
		case target == "secretsmanager.GetSecretValue" && in["SecretId"] == "prod/sandy" && in["VersionStage"] == nil:
			_, _ = w.Write([]byte(`{"ARN":"arn:aws:secretsmanager:eu-west-1:1:secret:prod/sandy-AbCdEf","Name":"prod/sandy","SecretString":"sandy-key-1","VersionId":"v1","VersionStages":["AWSCURRENT"]}`))
		case target == "secretsmanager.GetSecretValue" && in["SecretId"] == "prod/sandy" && in["VersionStage"] == "AWSPREVIOUS":
			_, _ = w.Write([]byte(`{"Name":"prod/sandy","SecretString":"sandy-key-0","VersionId":"v0"}`))
		case target == "secretsmanager.GetSecretValue" && in["SecretId"] == "prod/cert":
			_, _ = w.Write([]byte(`{"Name":"prod/cert","SecretBinary":"AAEC/w==","VersionId":"v9"}`))
		case target == "secretsmanager.GetSecretValue":
			w.WriteHeader(http.StatusBadRequest)
			_, _ = w.Write([]byte(`{"__type":"ResourceNotFoundException","message":"Secrets Manager can't find the specified secret."}`))
		case target == "AmazonSSM.GetParameter" && in["Name"] == "/sandstep/modal-token" && in["WithDecryption"] == true:
			_, _ = w.Write([]byte(`{"Parameter":{"ARN":"arn:aws:ssm:eu-west-1:1:parameter/sandstep/modal-token","Name":"/sandstep/modal-token","Type":"SecureString","Value":"modal-token-1","Version":3}}`))
		case target == "AmazonSSM.GetParameter":
			w.WriteHeader(http.StatusBadRequest)
			_, _ = w.Write([]byte(`{"__type":"ParameterNotFound"}`))
		default:
			t.Errorf("unexpected call %s %v", target, in)
			w.WriteHeader(http.StatusBadRequest)
		}
	}))
	t.Cleanup(srv.Close)
	return srv, &scopes
}

func TestSecretsThroughTheSignedClient(t *testing.T) {
	srv, scopes := fakeStore(t)
	env := awsenv.FromEnv(envOf(map[string]string{
		"AWS_REGION": "eu-west-1", "AWS_ACCESS_KEY_ID": "AKIDEXAMPLE", "AWS_SECRET_ACCESS_KEY": "host-secret-key",
		"AWS_ENDPOINT_URL_SECRETS_MANAGER": srv.URL, "AWS_ENDPOINT_URL_SSM": srv.URL,
	}))
	sm, ssm := env.NewClient(awsenv.SecretsManager), env.NewClient(awsenv.SSM)
	ctx := context.Background()

	v, err := sm.GetSecretValue(ctx, "prod/sandy", "")
	if err != nil || v.String != "sandy-key-1" || v.VersionID != "v1" || v.Binary != nil {
		t.Fatalf("current = %+v, %v", v, err)
	}
	if v, err := sm.GetSecretValue(ctx, "prod/sandy", "AWSPREVIOUS"); err != nil || v.String != "sandy-key-0" {
		t.Fatalf("previous = %+v, %v", v, err)
	}
	if v, err := sm.GetSecretValue(ctx, "prod/cert", ""); err != nil || string(v.Binary) != "\x00\x01\x02\xff" || v.String != "" {
		t.Fatalf("binary = %+v, %v", v, err)
	}
	_, err = sm.GetSecretValue(ctx, "prod/missing", "")
	if awsenv.ErrorCode(err) != "ResourceNotFoundException" || !strings.Contains(err.Error(), "prod/missing") {
		t.Fatalf("missing secret: %v", err)
	}
	if p, err := ssm.GetParameter(ctx, "/sandstep/modal-token"); err != nil || p != "modal-token-1" {
		t.Fatalf("parameter = %q, %v", p, err)
	}
	_, err = ssm.GetParameter(ctx, "/sandstep/missing")
	if awsenv.ErrorCode(err) != "ParameterNotFound" {
		t.Fatalf("missing parameter: %v", err)
	}
	if strings.Contains(err.Error(), "host-secret-key") {
		t.Fatalf("the secret key is in an error: %v", err)
	}
	for i, s := range *scopes {
		want := "/eu-west-1/secretsmanager/aws4_request"
		if i >= 4 {
			want = "/eu-west-1/ssm/aws4_request"
		}
		if !strings.HasPrefix(s, "AKIDEXAMPLE/") || !strings.HasSuffix(s, want) {
			t.Errorf("request %d signed for %q, want .../%s", i, s, want)
		}
	}
	if len(*scopes) != 6 {
		t.Fatalf("%d signed requests, want 6", len(*scopes))
	}
}

func TestSecretStoreEndpoints(t *testing.T) {
	env := awsenv.FromEnv(envOf(map[string]string{"AWS_REGION": "eu-west-1"}))
	if got := env.Endpoint(awsenv.SecretsManager); got != "https://secretsmanager.eu-west-1.amazonaws.com" {
		t.Errorf("secrets manager endpoint %q", got)
	}
	if got := env.Endpoint(awsenv.SSM); got != "https://ssm.eu-west-1.amazonaws.com" {
		t.Errorf("ssm endpoint %q", got)
	}
}
