package ddblocal_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/sandstep/sandstep/internal/emulation/ddblocal"
	"github.com/sandstep/sandstep/internal/service/store"
	"github.com/sandstep/sandstep/internal/testkit/testddb"
)

func keyOf(ks []types.KeySchemaElement) string {
	var parts []string
	for _, k := range ks {
		parts = append(parts, aws.ToString(k.AttributeName)+":"+string(k.KeyType))
	}
	return strings.Join(parts, ",")
}

func TestLoadTablesFromTemplate(t *testing.T) {
	path, err := ddblocal.FindTemplate()
	if err != nil {
		t.Fatal(err)
	}
	specs, err := ddblocal.LoadTables(path, "pre-")
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]ddblocal.TableSpec{}
	for _, s := range specs {
		byName[aws.ToString(s.Input.TableName)] = s
	}
	if len(byName) != 4 {
		t.Fatalf("tables = %v", byName)
	}
	for _, suffix := range []string{store.JobsTableSuffix, store.SessionsTableSuffix, store.SandboxesTableSuffix, store.DocsTableSuffix} {
		s, ok := byName["pre-"+suffix]
		if !ok {
			t.Fatalf("no table pre-%s", suffix)
		}
		if s.Input.BillingMode != types.BillingModePayPerRequest || s.TTLAttribute != "expires_at" {
			t.Fatalf("%s: billing %s, TTL %q", suffix, s.Input.BillingMode, s.TTLAttribute)
		}
	}
	if k := keyOf(byName["pre-jobs"].Input.KeySchema); k != "pk:HASH,sk:RANGE" {
		t.Fatalf("jobs key = %s", k)
	}
	if k := keyOf(byName["pre-docs"].Input.KeySchema); k != "pk:HASH,sk:RANGE" {
		t.Fatalf("docs key = %s", k)
	}
	gsis := byName["pre-sandboxes"].Input.GlobalSecondaryIndexes
	if len(gsis) != 3 || aws.ToString(gsis[0].IndexName) != "by-live-deadline" || keyOf(gsis[0].KeySchema) != "live_shard:HASH,deadline:RANGE" ||
		gsis[0].Projection.ProjectionType != types.ProjectionTypeAll ||
		aws.ToString(gsis[2].IndexName) != "by-tenant-usage" || keyOf(gsis[2].KeySchema) != "usage_shard:HASH,usage_at:RANGE" {
		t.Fatalf("sandboxes indexes = %+v", gsis)
	}
	gsis = byName["pre-sessions"].Input.GlobalSecondaryIndexes
	if len(gsis) != 2 || keyOf(gsis[0].KeySchema) != "gsi_state:HASH,idle_expires_at:RANGE" ||
		aws.ToString(gsis[1].IndexName) != "by-tenant" || keyOf(gsis[1].KeySchema) != "gsi_tenant:HASH,created_at:RANGE" {
		t.Fatalf("sessions indexes = %+v", gsis)
	}
	gsis = byName["pre-jobs"].Input.GlobalSecondaryIndexes
	if len(gsis) != 1 || aws.ToString(gsis[0].IndexName) != "by-tenant" || keyOf(gsis[0].KeySchema) != "gsi_tenant:HASH,created_at:RANGE" ||
		gsis[0].Projection.ProjectionType != types.ProjectionTypeKeysOnly {
		t.Fatalf("jobs indexes = %+v", gsis)
	}
}

func TestCreateTablesIdempotent(t *testing.T) {
	env := testddb.ForTests(t) // has created the tables once
	ctx := ctxT(t)
	path, err := ddblocal.FindTemplate()
	if err != nil {
		t.Fatal(err)
	}
	if err := ddblocal.CreateTables(ctx, env.Client, path, env.Prefix); err != nil {
		t.Fatalf("second CreateTables: %v", err)
	}
	out, err := env.Client.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(env.Prefix + "sandboxes")})
	if err != nil {
		t.Fatal(err)
	}
	var idx []string
	for _, g := range out.Table.GlobalSecondaryIndexes {
		idx = append(idx, aws.ToString(g.IndexName)+"="+keyOf(g.KeySchema))
	}
	if got := strings.Join(idx, " "); !strings.Contains(got, "by-live-deadline=live_shard:HASH,deadline:RANGE") || !strings.Contains(got, "by-owner=owner:HASH,created_at:RANGE") {
		t.Fatalf("indexes in DynamoDB Local: %s", got)
	}
	for _, suffix := range []string{"jobs", "sessions", "sandboxes", "docs"} {
		ttl, err := env.Client.DescribeTimeToLive(ctx, &dynamodb.DescribeTimeToLiveInput{TableName: aws.String(env.Prefix + suffix)})
		if err != nil {
			t.Fatal(err)
		}
		if d := ttl.TimeToLiveDescription; d.TimeToLiveStatus != types.TimeToLiveStatusEnabled || aws.ToString(d.AttributeName) != "expires_at" {
			t.Fatalf("%s TTL = %s on %q", suffix, d.TimeToLiveStatus, aws.ToString(d.AttributeName))
		}
	}
}

func writeTemplate(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "template.yaml")
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestCreateTablesRefusesDrift(t *testing.T) {
	env := testddb.ForTests(t)
	// The same table name with another key schema than the one created.
	p := writeTemplate(t, `
Parameters:
  TablePrefix: {Type: String}
Resources:
  JobsTable:
    Type: AWS::DynamoDB::Table
    Properties:
      TableName: !Sub "${TablePrefix}jobs"
      BillingMode: PAY_PER_REQUEST
      AttributeDefinitions: [{AttributeName: id, AttributeType: S}]
      KeySchema: [{AttributeName: id, KeyType: HASH}]
`)
	err := ddblocal.CreateTables(ctxT(t), env.Client, p, env.Prefix)
	if err == nil || !strings.Contains(err.Error(), "differs from template.yaml") {
		t.Fatalf("CreateTables over a different table: %v", err)
	}
}

// TestTemplateShortForms: every CloudFormation short-form tag decodes, and
// the table names resolve through Ref and both forms of Sub.
func TestTemplateShortForms(t *testing.T) {
	p := writeTemplate(t, `
AWSTemplateFormatVersion: "2010-09-09"
Transform: AWS::Serverless-2016-10-31
Parameters:
  TablePrefix: {Type: String, Default: ignored-}
  Stage: {Type: String, Default: dev}
Conditions:
  IsProd: !Equals [!Ref Stage, prod]
  NotProd: !Not [!Condition IsProd]
  Both: !And [!Condition IsProd, !Or [!Condition NotProd, !Equals [a, b]]]
Mappings:
  M: {dev: {Size: 1}}
Resources:
  Fn:
    Type: AWS::Serverless::Function
    Properties:
      Environment:
        Variables:
          JOBS: !Ref Plain
          ARN: !GetAtt Plain.Arn
          LIST: !Join [",", [!Select [0, !Split [",", "a,b"]], !GetAZs ""]]
          SIZE: !FindInMap [M, !Ref Stage, Size]
          IMPORT: !ImportValue other-stack-output
          B64: !Base64 "x"
          CIDR: !Cidr [10.0.0.0/16, 2, 8]
          IF: !If [IsProd, yes, no]
  Plain:
    Type: AWS::DynamoDB::Table
    Properties:
      TableName: !Sub ["${TablePrefix}${Kind}", {Kind: !Ref Stage}]
      BillingMode: PROVISIONED
      ProvisionedThroughput: {ReadCapacityUnits: 2, WriteCapacityUnits: "3"}
      AttributeDefinitions: [{AttributeName: id, AttributeType: S}]
      KeySchema: [{AttributeName: id, KeyType: HASH}]
  LongForm:
    Type: AWS::DynamoDB::Table
    Properties:
      TableName: {"Fn::Sub": "${TablePrefix}long-${AWS::Region}-${!Literal}"}
      BillingMode: PAY_PER_REQUEST
      AttributeDefinitions: [{AttributeName: id, AttributeType: N}]
      KeySchema: [{AttributeName: id, KeyType: HASH}]
  Simple:
    Type: AWS::Serverless::SimpleTable
    Properties:
      TableName: !Ref TablePrefix
      PrimaryKey: {Name: n, Type: Number}
`)
	specs, err := ddblocal.LoadTables(p, "x-")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range specs {
		got = append(got, s.Resource+"="+aws.ToString(s.Input.TableName)+":"+string(s.Input.BillingMode))
	}
	want := "LongForm=x-long-us-east-1-${Literal}:PAY_PER_REQUEST Plain=x-dev:PROVISIONED Simple=x-:PAY_PER_REQUEST"
	if strings.Join(got, " ") != want {
		t.Fatalf("tables = %s\nwant     %s", strings.Join(got, " "), want)
	}
	if pt := specs[1].Input.ProvisionedThroughput; aws.ToInt64(pt.ReadCapacityUnits) != 2 || aws.ToInt64(pt.WriteCapacityUnits) != 3 {
		t.Fatalf("throughput = %+v", pt)
	}
	if ad := specs[2].Input.AttributeDefinitions; ad[0].AttributeType != types.ScalarAttributeTypeN || aws.ToString(ad[0].AttributeName) != "n" {
		t.Fatalf("simple table key = %+v", ad)
	}

	for name, body := range map[string]string{
		"GetAtt name": `
Resources:
  T:
    Type: AWS::DynamoDB::Table
    Properties:
      TableName: !GetAtt Other.Name
      KeySchema: [{AttributeName: id, KeyType: HASH}]
`,
		"unknown Sub variable": `
Resources:
  T:
    Type: AWS::DynamoDB::Table
    Properties:
      TableName: !Sub "${Nope}jobs"
      KeySchema: [{AttributeName: id, KeyType: HASH}]
`,
		"no index projection": `
Resources:
  T:
    Type: AWS::DynamoDB::Table
    Properties:
      TableName: t
      BillingMode: PAY_PER_REQUEST
      KeySchema: [{AttributeName: id, KeyType: HASH}]
      GlobalSecondaryIndexes: [{IndexName: i, KeySchema: [{AttributeName: x, KeyType: HASH}]}]
`,
	} {
		if _, err := ddblocal.LoadTables(writeTemplate(t, body), "x-"); err == nil {
			t.Errorf("%s: LoadTables accepted it", name)
		}
	}
}

// A table made before the template gained an index gets it added in place,
// with its data, rather than a demand to delete the table.
func TestCreateTablesAddsMissingIndexes(t *testing.T) {
	env := testddb.ForTests(t)
	ctx := testCtx(t)
	prefix := env.Prefix + "old-"
	old := writeTemplate(t, `
Parameters:
  TablePrefix: {Type: String}
Resources:
  JobsTable:
    Type: AWS::DynamoDB::Table
    Properties:
      TableName: !Sub "${TablePrefix}jobs"
      BillingMode: PAY_PER_REQUEST
      AttributeDefinitions: [{AttributeName: pk, AttributeType: S}, {AttributeName: sk, AttributeType: S}]
      KeySchema: [{AttributeName: pk, KeyType: HASH}, {AttributeName: sk, KeyType: RANGE}]
`)
	if err := ddblocal.CreateTables(ctx, env.Client, old, prefix); err != nil {
		t.Fatal(err)
	}
	s := store.NewLocal(env.Endpoint, prefix)
	if _, _, err := s.CreateJob(ctx, store.NewJob{ID: "before", Tenant: "acme", ClientID: "before", Request: json.RawMessage(`{}`), RequestHash: "h"}); err != nil {
		t.Fatal(err)
	}
	path, err := ddblocal.FindTemplate()
	if err != nil {
		t.Fatal(err)
	}
	if err := ddblocal.CreateTables(ctx, env.Client, path, prefix); err != nil {
		t.Fatalf("CreateTables over a table without the new index: %v", err)
	}
	page, err := s.ListTenantJobs(ctx, "acme", store.ListQuery{Limit: 10}, nil)
	if err != nil || len(page.Jobs) != 1 || page.Jobs[0].ID != "before" {
		t.Fatalf("listing after the upgrade = %+v, %v", page, err)
	}
	if _, err := s.GetJob(ctx, "before"); err != nil {
		t.Fatal(err)
	}
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	t.Cleanup(cancel)
	return ctx
}
