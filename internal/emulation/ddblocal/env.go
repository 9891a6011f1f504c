package ddblocal

import (
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/sandstep/sandstep/internal/service/awsenv"
	"github.com/sandstep/sandstep/internal/service/store"
)

// FromEnv returns a client for the DynamoDB that the environment names with
// AWS_ENDPOINT_URL_DYNAMODB or AWS_ENDPOINT_URL (read as the AWS SDKs read
// them, see awsenv), and that endpoint; nil and "" when it names none, and
// the caller starts its own DynamoDB Local. Without AWS_REGION or
// credentials in the environment, the ones DynamoDB Local accepts are used:
// it checks that requests are signed, not by whom.
func FromEnv(getenv func(string) string) (*dynamodb.Client, string) {
	env := awsenv.FromEnv(getenv)
	endpoint := env.ConfiguredEndpoint(awsenv.DynamoDB)
	if endpoint == "" {
		return nil, ""
	}
	region := env.Region
	if region == "" {
		region = store.LocalRegion
	}
	creds := env.Credentials
	if getenv(awsenv.EnvAccessKeyID) == "" {
		creds = credentials.NewStaticCredentialsProvider("local", "local", "")
	}
	return dynamodb.New(dynamodb.Options{Region: region, BaseEndpoint: aws.String(endpoint), Credentials: creds}), endpoint
}
