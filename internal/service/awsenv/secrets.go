package awsenv

import (
	"context"
	"fmt"
	"net/http"
)

// Reading a secret is one JSON call each in Secrets Manager and SSM
// Parameter Store. Through Client they add nothing measurable to a Lambda
// bootstrap (less than its 64 KiB size step); the SDK's secretsmanager
// v1.50.12 and ssm v1.82.1 clients add 1,572,864 bytes to
// ProvisionFunction (BENCHMARKS.md), and they would be in every function
// that hosts the provider plugin, whose secrets they resolve.

// The secret stores.
var (
	SecretsManager = Service{EnvID: "SECRETS_MANAGER", SigningName: "secretsmanager"}
	SSM            = Service{EnvID: "SSM", SigningName: "ssm"}
)

// SecretValue is what GetSecretValue returns: a secret holds a string or
// bytes.
type SecretValue struct {
	String    string
	Binary    []byte
	VersionID string
}

// GetSecretValue reads the current version of secret id (a name or an ARN)
// from Secrets Manager; versionStage selects another stage ("" means
// AWSCURRENT). c must be a Client for SecretsManager. A missing secret is
// an *APIError with Code "ResourceNotFoundException".
func (c *Client) GetSecretValue(ctx context.Context, id, versionStage string) (SecretValue, error) {
	in := struct {
		SecretID     string `json:"SecretId"`
		VersionStage string `json:",omitempty"`
	}{id, versionStage}
	var out struct {
		SecretString string
		SecretBinary []byte // base64 in the JSON, as encoding/json decodes []byte
		VersionID    string `json:"VersionId"`
	}
	if err := c.Do(ctx, jsonTarget("application/x-amz-json-1.1", "secretsmanager.GetSecretValue", in), &out); err != nil {
		return SecretValue{}, fmt.Errorf("secretsmanager GetSecretValue %s: %w", id, err)
	}
	return SecretValue{String: out.SecretString, Binary: out.SecretBinary, VersionID: out.VersionID}, nil
}

// GetParameter reads parameter name (a name, name:version or name:label,
// or an ARN) from SSM Parameter Store, a SecureString decrypted. c must be
// a Client for SSM. A missing parameter is an *APIError with Code
// "ParameterNotFound".
func (c *Client) GetParameter(ctx context.Context, name string) (string, error) {
	in := struct {
		Name           string
		WithDecryption bool
	}{name, true}
	var out struct {
		Parameter struct{ Value string }
	}
	if err := c.Do(ctx, jsonTarget("application/x-amz-json-1.1", "AmazonSSM.GetParameter", in), &out); err != nil {
		return "", fmt.Errorf("ssm GetParameter %s: %w", name, err)
	}
	return out.Parameter.Value, nil
}

// jsonTarget is a call of AWS's JSON protocols: POST / naming the
// operation in X-Amz-Target.
func jsonTarget(contentType, target string, body any) Request {
	h := http.Header{}
	h.Set("Content-Type", contentType)
	h.Set("X-Amz-Target", target)
	return Request{Path: "/", Header: h, Body: body}
}
