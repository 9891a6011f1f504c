// Package awsenv configures sandstep's AWS clients from the process
// environment, the way the AWS SDKs document it: the region, the
// credentials Lambda puts in the environment, and the endpoint variables
// AWS_ENDPOINT_URL and AWS_ENDPOINT_URL_<SERVICE> (with
// AWS_IGNORE_CONFIGURED_ENDPOINT_URLS to switch them off), so that one
// deployment can be pointed at DynamoDB Local, LocalStack or `sam local`
// without code changes.
//
// It reads the environment itself rather than through the SDK's config
// module, whose shared files, SSO and IMDS support add megabytes to every
// Lambda bootstrap and which a Lambda never uses. For the same reason the
// small JSON APIs sandstep calls besides DynamoDB (Step Functions, Lambda
// Invoke, Secrets Manager's GetSecretValue and SSM's GetParameter) are
// signed and sent by Client instead of SDK service clients.
package awsenv

import (
	"net/url"
	"os"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
)

// Environment variables, as the AWS SDKs name them.
const (
	EnvRegion        = "AWS_REGION"
	EnvDefaultRegion = "AWS_DEFAULT_REGION"
	EnvAccessKeyID   = "AWS_ACCESS_KEY_ID"
	EnvSecretKey     = "AWS_SECRET_ACCESS_KEY"
	EnvSessionToken  = "AWS_SESSION_TOKEN"
	// EnvEndpointURL is the endpoint for every service; a service's own
	// AWS_ENDPOINT_URL_<SERVICE> overrides it.
	EnvEndpointURL = "AWS_ENDPOINT_URL"
	// EnvIgnoreEndpoints = "true" ignores both endpoint variables.
	EnvIgnoreEndpoints = "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS"
)

// Service is an AWS service as the environment and the signer know it.
type Service struct {
	// EnvID is the service identifier in AWS_ENDPOINT_URL_<EnvID>.
	EnvID string
	// SigningName is the SigV4 service name; it is also the host prefix of
	// the default endpoint (<SigningName>.<region>.amazonaws.com).
	SigningName string
}

// The services sandstep calls.
var (
	DynamoDB      = Service{EnvID: "DYNAMODB", SigningName: "dynamodb"}
	StepFunctions = Service{EnvID: "SFN", SigningName: "states"}
	Lambda        = Service{EnvID: "LAMBDA", SigningName: "lambda"}
	// The secret stores config.toml's *_env keys may name
	// (internal/service/secrets).
	SecretsManager = Service{EnvID: "SECRETS_MANAGER", SigningName: "secretsmanager"}
	SSM            = Service{EnvID: "SSM", SigningName: "ssm"}
)

// Env is the AWS configuration of a process. Its endpoints come from the
// environment FromEnv was given; a zero Env reads os.Getenv.
type Env struct {
	Region      string
	Credentials aws.CredentialsProvider
	getenv      func(string) string
}

// FromEnv reads the configuration from getenv (os.Getenv when nil): the
// region from AWS_REGION, else AWS_DEFAULT_REGION; static credentials from
// AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN (Lambda's
// execution role puts them there).
func FromEnv(getenv func(string) string) Env {
	if getenv == nil {
		getenv = os.Getenv
	}
	region := getenv(EnvRegion)
	if region == "" {
		region = getenv(EnvDefaultRegion)
	}
	return Env{
		Region: region,
		Credentials: aws.NewCredentialsCache(credentials.NewStaticCredentialsProvider(
			getenv(EnvAccessKeyID), getenv(EnvSecretKey), getenv(EnvSessionToken))),
		getenv: getenv,
	}
}

// SDK returns the configuration for an SDK client; the endpoint is set per
// client (see DynamoDB), because a service's own variable overrides
// AWS_ENDPOINT_URL.
func (e Env) SDK() aws.Config {
	return aws.Config{Region: e.Region, Credentials: e.Credentials}
}

// ConfiguredEndpoint returns the endpoint the environment sets for s
// (AWS_ENDPOINT_URL_<SERVICE>, else AWS_ENDPOINT_URL), or "" when it sets
// none or AWS_IGNORE_CONFIGURED_ENDPOINT_URLS is true.
func (e Env) ConfiguredEndpoint(s Service) string {
	get := e.getenv
	if get == nil {
		get = os.Getenv
	}
	if strings.EqualFold(strings.TrimSpace(get(EnvIgnoreEndpoints)), "true") {
		return ""
	}
	if v := strings.TrimSpace(get(EnvEndpointURL + "_" + s.EnvID)); v != "" {
		return v
	}
	return strings.TrimSpace(get(EnvEndpointURL))
}

// Endpoint returns the URL to send s's requests to: the configured one, or
// AWS's regional endpoint.
func (e Env) Endpoint(s Service) string {
	if v := e.ConfiguredEndpoint(s); v != "" {
		return v
	}
	host := s.SigningName + "." + e.Region + ".amazonaws.com"
	if strings.HasPrefix(e.Region, "cn-") {
		host += ".cn"
	}
	return "https://" + host
}

// DynamoDB returns a DynamoDB client for the environment's region,
// credentials and endpoint.
func (e Env) DynamoDB() *dynamodb.Client {
	endpoint := e.ConfiguredEndpoint(DynamoDB)
	return dynamodb.NewFromConfig(e.SDK(), func(o *dynamodb.Options) {
		if endpoint != "" {
			o.BaseEndpoint = aws.String(endpoint)
		}
	})
}

// Redact returns an endpoint fit for a log line: scheme, host and path,
// without any user information or query a URL might carry.
func Redact(endpoint string) string {
	u, err := url.Parse(endpoint)
	if err != nil || u.Host == "" {
		return "(unparsable endpoint)"
	}
	return u.Scheme + "://" + u.Host + u.EscapedPath()
}
