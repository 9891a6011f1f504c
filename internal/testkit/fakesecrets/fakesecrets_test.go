package fakesecrets_test

import (
	"context"
	"errors"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	smtypes "github.com/aws/aws-sdk-go-v2/service/secretsmanager/types"
	"github.com/aws/aws-sdk-go-v2/service/ssm"
	ssmtypes "github.com/aws/aws-sdk-go-v2/service/ssm/types"

	"github.com/sandstep/sandstep/internal/testkit/fakesecrets"
)

// The fake answers the SDK's own clients as the services do: they decode
// its answers and map its errors to their typed errors.
func TestSDKClientsAgree(t *testing.T) {
	f := fakesecrets.New()
	t.Cleanup(f.Close)
	cfg := aws.Config{Region: fakesecrets.Region, Credentials: credentials.NewStaticCredentialsProvider("AKIDFAKE", "secret", "")}
	ctx := context.Background()

	sm := secretsmanager.NewFromConfig(cfg, func(o *secretsmanager.Options) { o.BaseEndpoint = aws.String(f.URL) })
	arn := f.PutSecret("sandy-api-key", `{"api_key":"k-1"}`)
	for _, id := range []string{"sandy-api-key", arn, arn[:len(arn)-7]} {
		out, err := sm.GetSecretValue(ctx, &secretsmanager.GetSecretValueInput{SecretId: aws.String(id)})
		if err != nil {
			t.Fatalf("GetSecretValue(%s): %v", id, err)
		}
		if aws.ToString(out.SecretString) != `{"api_key":"k-1"}` || aws.ToString(out.ARN) != arn || aws.ToString(out.Name) != "sandy-api-key" ||
			out.CreatedDate == nil || len(out.VersionStages) != 1 {
			t.Fatalf("GetSecretValue(%s) = %+v", id, out)
		}
	}
	_, err := sm.GetSecretValue(ctx, &secretsmanager.GetSecretValueInput{SecretId: aws.String("nope")})
	var nf *smtypes.ResourceNotFoundException
	if !errors.As(err, &nf) {
		t.Fatalf("GetSecretValue of an absent secret: %v (%T), want ResourceNotFoundException", err, err)
	}
	// A binary secret, and a rotation: the new version is AWSCURRENT, the
	// old one AWSPREVIOUS; a stage no version has is not found.
	f.PutSecretBinary("cert", []byte{0, 1, 2, 0xff})
	bin, err := sm.GetSecretValue(ctx, &secretsmanager.GetSecretValueInput{SecretId: aws.String("cert")})
	if err != nil || string(bin.SecretBinary) != "\x00\x01\x02\xff" || bin.SecretString != nil {
		t.Fatalf("GetSecretValue of a binary secret = %+v, %v", bin, err)
	}
	f.PutSecret("sandy-api-key", `{"api_key":"k-2"}`)
	for stage, want := range map[string]string{"AWSCURRENT": `{"api_key":"k-2"}`, "AWSPREVIOUS": `{"api_key":"k-1"}`} {
		out, err := sm.GetSecretValue(ctx, &secretsmanager.GetSecretValueInput{SecretId: aws.String("sandy-api-key"), VersionStage: aws.String(stage)})
		if err != nil || aws.ToString(out.SecretString) != want || len(out.VersionStages) != 1 || out.VersionStages[0] != stage {
			t.Fatalf("GetSecretValue at %s = %+v, %v", stage, out, err)
		}
	}
	if _, err := sm.GetSecretValue(ctx, &secretsmanager.GetSecretValueInput{SecretId: aws.String("cert"), VersionStage: aws.String("AWSPREVIOUS")}); !errors.As(err, &nf) {
		t.Fatalf("GetSecretValue of a stage no version has: %v, want ResourceNotFoundException", err)
	}

	ps := ssm.NewFromConfig(cfg, func(o *ssm.Options) { o.BaseEndpoint = aws.String(f.URL) })
	parn := f.PutParameter("/sandstep/key", "SecureString", "k-2")
	for _, name := range []string{"/sandstep/key", parn} {
		out, err := ps.GetParameter(ctx, &ssm.GetParameterInput{Name: aws.String(name), WithDecryption: aws.Bool(true)})
		if err != nil {
			t.Fatalf("GetParameter(%s): %v", name, err)
		}
		if p := out.Parameter; aws.ToString(p.Value) != "k-2" || p.Type != ssmtypes.ParameterTypeSecureString || aws.ToString(p.ARN) != parn || p.LastModifiedDate == nil {
			t.Fatalf("GetParameter(%s) = %+v", name, p)
		}
	}
	out, err := ps.GetParameter(ctx, &ssm.GetParameterInput{Name: aws.String("/sandstep/key")})
	if err != nil || aws.ToString(out.Parameter.Value) == "k-2" {
		t.Fatalf("GetParameter without decryption = %+v, %v; want the ciphertext", out, err)
	}
	_, err = ps.GetParameter(ctx, &ssm.GetParameterInput{Name: aws.String("/nope"), WithDecryption: aws.Bool(true)})
	var pnf *ssmtypes.ParameterNotFound
	if !errors.As(err, &pnf) {
		t.Fatalf("GetParameter of an absent parameter: %v (%T), want ParameterNotFound", err, err)
	}
	if f.Calls("GetSecretValue") != 8 || f.Calls("GetParameter") != 4 {
		t.Fatalf("calls = %d, %d", f.Calls("GetSecretValue"), f.Calls("GetParameter"))
	}
}

// An unsigned request, or one signed for another service, is refused.
func TestUnsignedRefused(t *testing.T) {
	f := fakesecrets.New()
	t.Cleanup(f.Close)
	f.PutSecret("s", "v")
	cfg := aws.Config{Region: fakesecrets.Region, Credentials: aws.AnonymousCredentials{}}
	sm := secretsmanager.NewFromConfig(cfg, func(o *secretsmanager.Options) { o.BaseEndpoint = aws.String(f.URL) })
	if _, err := sm.GetSecretValue(context.Background(), &secretsmanager.GetSecretValueInput{SecretId: aws.String("s")}); err == nil {
		t.Fatal("an unsigned GetSecretValue succeeded")
	}
}
