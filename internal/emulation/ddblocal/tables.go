package ddblocal

import (
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/sandstep/sandstep/internal/emulation/cfn"
	"github.com/sandstep/sandstep/internal/service/store"
)

// TableSpec is one DynamoDB table declared in template.yaml, ready for
// CreateTable. Creating tables from the template is the local stack's and
// the tests' business: on AWS, CloudFormation creates them, and the Lambdas
// do not link the template reader.
type TableSpec struct {
	// Resource is the logical id in the template ("JobsTable").
	Resource string
	Input    *dynamodb.CreateTableInput
	// TTLAttribute is the TimeToLiveSpecification attribute ("" = no TTL).
	TTLAttribute string
}

// LoadTables reads every AWS::DynamoDB::Table and AWS::Serverless::SimpleTable
// in the SAM template at path, resolving the TablePrefix parameter to prefix
// and other parameters to their defaults.
func LoadTables(path, prefix string) ([]TableSpec, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read template: %w", err)
	}
	root, err := cfn.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("parse %s: %w", path, err)
	}
	params := map[string]string{
		"AWS::Region":    store.LocalRegion,
		"AWS::AccountId": "000000000000",
		"AWS::Partition": "aws",
		"AWS::StackName": "sandstep",
	}
	for name, p := range asMap(root["Parameters"]) {
		if d, ok := asMap(p)["Default"]; ok {
			params[name] = fmt.Sprint(d)
		}
	}
	params["TablePrefix"] = prefix

	resources := asMap(root["Resources"])
	names := make([]string, 0, len(resources))
	for name := range resources {
		names = append(names, name)
	}
	slices.Sort(names)
	var specs []TableSpec
	for _, name := range names {
		res := asMap(resources[name])
		props := asMap(res["Properties"])
		var spec TableSpec
		var err error
		switch res["Type"] {
		case "AWS::DynamoDB::Table":
			spec, err = dynamoTable(props, params)
		case "AWS::Serverless::SimpleTable":
			spec, err = simpleTable(name, props, params)
		default:
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("%s: resource %s: %w", path, name, err)
		}
		spec.Resource = name
		specs = append(specs, spec)
	}
	return specs, nil
}

// CreateTables creates the template's tables under prefix and enables their
// TTL. Tables that exist already are fine if their keys and indexes match the
// template; a mismatch is an error, not a silent divergence.
func CreateTables(ctx context.Context, client *dynamodb.Client, templatePath, prefix string) error {
	specs, err := LoadTables(templatePath, prefix)
	if err != nil {
		return err
	}
	for _, spec := range specs {
		if err := createTable(ctx, client, spec); err != nil {
			return err
		}
	}
	return nil
}

// DeleteTables deletes the template's tables under prefix; missing ones are
// skipped.
func DeleteTables(ctx context.Context, client *dynamodb.Client, templatePath, prefix string) error {
	specs, err := LoadTables(templatePath, prefix)
	if err != nil {
		return err
	}
	for _, spec := range specs {
		_, err := client.DeleteTable(ctx, &dynamodb.DeleteTableInput{TableName: spec.Input.TableName})
		var nf *types.ResourceNotFoundException
		if err != nil && !errors.As(err, &nf) {
			return fmt.Errorf("delete table %s: %w", aws.ToString(spec.Input.TableName), err)
		}
	}
	return nil
}

func createTable(ctx context.Context, client *dynamodb.Client, spec TableSpec) error {
	name := aws.ToString(spec.Input.TableName)
	_, err := client.CreateTable(ctx, spec.Input)
	var inUse *types.ResourceInUseException
	switch {
	case errors.As(err, &inUse):
		out, err := client.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: spec.Input.TableName})
		if err != nil {
			return fmt.Errorf("describe table %s: %w", name, err)
		}
		missing := missingIndexes(spec.Input, out.Table)
		if diff := tableDiff(spec.Input, withIndexes(out.Table, missing)); diff != "" {
			return fmt.Errorf("table %s exists but differs from template.yaml (%s); delete it (in local mode, the database directory) to recreate it", name, diff)
		}
		if err := addIndexes(ctx, client, spec.Input, missing); err != nil {
			return err
		}
	case err != nil:
		return fmt.Errorf("create table %s: %w", name, err)
	}
	waiter := dynamodb.NewTableExistsWaiter(client, func(o *dynamodb.TableExistsWaiterOptions) {
		o.MinDelay = 50 * time.Millisecond
		o.MaxDelay = time.Second
	})
	if err := waiter.Wait(ctx, &dynamodb.DescribeTableInput{TableName: spec.Input.TableName}, 2*time.Minute); err != nil {
		return fmt.Errorf("wait for table %s: %w", name, err)
	}
	if spec.TTLAttribute == "" {
		return nil
	}
	ttl, err := client.DescribeTimeToLive(ctx, &dynamodb.DescribeTimeToLiveInput{TableName: spec.Input.TableName})
	if err != nil {
		return fmt.Errorf("describe TTL of %s: %w", name, err)
	}
	if d := ttl.TimeToLiveDescription; d != nil && d.TimeToLiveStatus == types.TimeToLiveStatusEnabled {
		if aws.ToString(d.AttributeName) == spec.TTLAttribute {
			return nil
		}
		return fmt.Errorf("table %s has TTL on %q, template.yaml says %q", name, aws.ToString(d.AttributeName), spec.TTLAttribute)
	}
	_, err = client.UpdateTimeToLive(ctx, &dynamodb.UpdateTimeToLiveInput{
		TableName: spec.Input.TableName,
		TimeToLiveSpecification: &types.TimeToLiveSpecification{
			AttributeName: aws.String(spec.TTLAttribute),
			Enabled:       aws.Bool(true),
		},
	})
	if err != nil {
		return fmt.Errorf("enable TTL on %s: %w", name, err)
	}
	return nil
}

// tableDiff describes how an existing table's keys and indexes differ from
// the wanted ones ("" when they match).
func tableDiff(want *dynamodb.CreateTableInput, have *types.TableDescription) string {
	if k1, k2 := keyString(want.KeySchema), keyString(have.KeySchema); k1 != k2 {
		return fmt.Sprintf("key %s, want %s", k2, k1)
	}
	wantIdx := map[string]string{}
	for _, g := range want.GlobalSecondaryIndexes {
		wantIdx[aws.ToString(g.IndexName)] = keyString(g.KeySchema)
	}
	haveIdx := map[string]string{}
	for _, g := range have.GlobalSecondaryIndexes {
		haveIdx[aws.ToString(g.IndexName)] = keyString(g.KeySchema)
	}
	for name, k := range wantIdx {
		if hk, ok := haveIdx[name]; !ok {
			return fmt.Sprintf("index %s missing", name)
		} else if hk != k {
			return fmt.Sprintf("index %s key %s, want %s", name, hk, k)
		}
	}
	for name := range haveIdx {
		if _, ok := wantIdx[name]; !ok {
			return fmt.Sprintf("index %s not in the template", name)
		}
	}
	return ""
}

func keyString(ks []types.KeySchemaElement) string {
	parts := make([]string, len(ks))
	for i, k := range ks {
		parts[i] = aws.ToString(k.AttributeName) + ":" + string(k.KeyType)
	}
	return strings.Join(parts, ",")
}

func dynamoTable(props map[string]any, params map[string]string) (TableSpec, error) {
	in := &dynamodb.CreateTableInput{}
	name, err := cfnString(props["TableName"], params)
	if err != nil {
		return TableSpec{}, fmt.Errorf("TableName: %w", err)
	}
	if name == "" {
		return TableSpec{}, errors.New("TableName is required (the store finds tables by name)")
	}
	in.TableName = aws.String(name)
	for i, a := range asList(props["AttributeDefinitions"]) {
		m := asMap(a)
		n, err1 := cfnString(m["AttributeName"], params)
		t, err2 := cfnString(m["AttributeType"], params)
		if err := errors.Join(err1, err2); err != nil || n == "" || t == "" {
			return TableSpec{}, fmt.Errorf("AttributeDefinitions[%d]: need AttributeName and AttributeType %v", i, err)
		}
		in.AttributeDefinitions = append(in.AttributeDefinitions, types.AttributeDefinition{
			AttributeName: aws.String(n), AttributeType: types.ScalarAttributeType(t),
		})
	}
	if in.KeySchema, err = keySchema(props["KeySchema"], params); err != nil {
		return TableSpec{}, fmt.Errorf("KeySchema: %w", err)
	}
	for i, g := range asList(props["GlobalSecondaryIndexes"]) {
		m := asMap(g)
		idx := types.GlobalSecondaryIndex{}
		n, err := cfnString(m["IndexName"], params)
		if err != nil || n == "" {
			return TableSpec{}, fmt.Errorf("GlobalSecondaryIndexes[%d]: IndexName is required %v", i, err)
		}
		idx.IndexName = aws.String(n)
		if idx.KeySchema, err = keySchema(m["KeySchema"], params); err != nil {
			return TableSpec{}, fmt.Errorf("index %s: KeySchema: %w", n, err)
		}
		if idx.Projection, err = projection(m["Projection"], params); err != nil {
			return TableSpec{}, fmt.Errorf("index %s: %w", n, err)
		}
		if pt, ok := m["ProvisionedThroughput"]; ok {
			if idx.ProvisionedThroughput, err = throughput(pt); err != nil {
				return TableSpec{}, fmt.Errorf("index %s: %w", n, err)
			}
		}
		in.GlobalSecondaryIndexes = append(in.GlobalSecondaryIndexes, idx)
	}
	for i, l := range asList(props["LocalSecondaryIndexes"]) {
		m := asMap(l)
		idx := types.LocalSecondaryIndex{}
		n, err := cfnString(m["IndexName"], params)
		if err != nil || n == "" {
			return TableSpec{}, fmt.Errorf("LocalSecondaryIndexes[%d]: IndexName is required %v", i, err)
		}
		idx.IndexName = aws.String(n)
		if idx.KeySchema, err = keySchema(m["KeySchema"], params); err != nil {
			return TableSpec{}, fmt.Errorf("index %s: KeySchema: %w", n, err)
		}
		if idx.Projection, err = projection(m["Projection"], params); err != nil {
			return TableSpec{}, fmt.Errorf("index %s: %w", n, err)
		}
		in.LocalSecondaryIndexes = append(in.LocalSecondaryIndexes, idx)
	}
	mode, err := cfnString(props["BillingMode"], params)
	if err != nil {
		return TableSpec{}, fmt.Errorf("BillingMode: %w", err)
	}
	if mode == "" {
		mode = string(types.BillingModeProvisioned) // CloudFormation's default
	}
	in.BillingMode = types.BillingMode(mode)
	if in.BillingMode == types.BillingModeProvisioned {
		if in.ProvisionedThroughput, err = throughput(props["ProvisionedThroughput"]); err != nil {
			return TableSpec{}, err
		}
	}
	if ss := asMap(props["StreamSpecification"]); ss != nil {
		vt, err := cfnString(ss["StreamViewType"], params)
		if err != nil {
			return TableSpec{}, fmt.Errorf("StreamSpecification: %w", err)
		}
		in.StreamSpecification = &types.StreamSpecification{StreamEnabled: aws.Bool(true), StreamViewType: types.StreamViewType(vt)}
	}
	spec := TableSpec{Input: in}
	if ttl := asMap(props["TimeToLiveSpecification"]); ttl != nil && truthy(ttl["Enabled"]) {
		if spec.TTLAttribute, err = cfnString(ttl["AttributeName"], params); err != nil || spec.TTLAttribute == "" {
			return TableSpec{}, fmt.Errorf("TimeToLiveSpecification: AttributeName is required %v", err)
		}
	}
	return spec, nil
}

// simpleTable converts SAM's SimpleTable: a hash key only (default "id" of
// type String), on-demand unless ProvisionedThroughput is given.
func simpleTable(logicalID string, props map[string]any, params map[string]string) (TableSpec, error) {
	name, err := cfnString(props["TableName"], params)
	if err != nil {
		return TableSpec{}, fmt.Errorf("TableName: %w", err)
	}
	if name == "" {
		name = logicalID
	}
	keyName, keyType := "id", "String"
	if pk := asMap(props["PrimaryKey"]); pk != nil {
		if keyName, err = cfnString(pk["Name"], params); err != nil {
			return TableSpec{}, fmt.Errorf("PrimaryKey: %w", err)
		}
		if keyType, err = cfnString(pk["Type"], params); err != nil {
			return TableSpec{}, fmt.Errorf("PrimaryKey: %w", err)
		}
	}
	scalar := map[string]types.ScalarAttributeType{"String": "S", "Number": "N", "Binary": "B"}[keyType]
	if scalar == "" {
		return TableSpec{}, fmt.Errorf("PrimaryKey.Type %q: want String, Number or Binary", keyType)
	}
	in := &dynamodb.CreateTableInput{
		TableName:            aws.String(name),
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String(keyName), AttributeType: scalar}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String(keyName), KeyType: types.KeyTypeHash}},
		BillingMode:          types.BillingModePayPerRequest,
	}
	if pt, ok := props["ProvisionedThroughput"]; ok {
		in.BillingMode = types.BillingModeProvisioned
		if in.ProvisionedThroughput, err = throughput(pt); err != nil {
			return TableSpec{}, err
		}
	}
	return TableSpec{Input: in}, nil
}

func keySchema(v any, params map[string]string) ([]types.KeySchemaElement, error) {
	var out []types.KeySchemaElement
	for i, k := range asList(v) {
		m := asMap(k)
		n, err1 := cfnString(m["AttributeName"], params)
		t, err2 := cfnString(m["KeyType"], params)
		if err := errors.Join(err1, err2); err != nil || n == "" || t == "" {
			return nil, fmt.Errorf("[%d]: need AttributeName and KeyType %v", i, err)
		}
		out = append(out, types.KeySchemaElement{AttributeName: aws.String(n), KeyType: types.KeyType(t)})
	}
	if len(out) == 0 {
		return nil, errors.New("empty")
	}
	return out, nil
}

func projection(v any, params map[string]string) (*types.Projection, error) {
	m := asMap(v)
	if m == nil {
		return nil, errors.New("Projection is required")
	}
	pt, err := cfnString(m["ProjectionType"], params)
	if err != nil {
		return nil, fmt.Errorf("Projection: %w", err)
	}
	p := &types.Projection{ProjectionType: types.ProjectionType(pt)}
	for _, a := range asList(m["NonKeyAttributes"]) {
		s, err := cfnString(a, params)
		if err != nil {
			return nil, fmt.Errorf("Projection.NonKeyAttributes: %w", err)
		}
		p.NonKeyAttributes = append(p.NonKeyAttributes, s)
	}
	return p, nil
}

func throughput(v any) (*types.ProvisionedThroughput, error) {
	m := asMap(v)
	r, err1 := strconv.ParseInt(fmt.Sprint(m["ReadCapacityUnits"]), 10, 64)
	w, err2 := strconv.ParseInt(fmt.Sprint(m["WriteCapacityUnits"]), 10, 64)
	if m == nil || err1 != nil || err2 != nil {
		return nil, errors.New("ProvisionedThroughput needs numeric ReadCapacityUnits and WriteCapacityUnits")
	}
	return &types.ProvisionedThroughput{ReadCapacityUnits: aws.Int64(r), WriteCapacityUnits: aws.Int64(w)}, nil
}

func truthy(v any) bool {
	switch b := v.(type) {
	case bool:
		return b
	case string:
		return strings.EqualFold(b, "true")
	}
	return false
}

func asMap(v any) map[string]any {
	m, _ := v.(map[string]any)
	return m
}

func asList(v any) []any {
	l, _ := v.([]any)
	return l
}

var subVar = regexp.MustCompile(`\$\{([^}!]+)\}`)

// cfnString evaluates a template value that must be a string: a literal, a
// Ref to a parameter, or a Sub over parameters. Anything else (GetAtt, Join,
// ImportValue...) cannot be known before deployment and is an error.
func cfnString(v any, params map[string]string) (string, error) {
	switch x := v.(type) {
	case nil:
		return "", nil
	case string:
		return x, nil
	case int, int64, float64, bool:
		return fmt.Sprint(x), nil
	case map[string]any:
		if len(x) != 1 {
			break
		}
		if ref, ok := x["Ref"].(string); ok {
			p, ok := params[ref]
			if !ok {
				return "", fmt.Errorf("Ref %s: not a parameter", ref)
			}
			return p, nil
		}
		if sub, ok := x["Fn::Sub"]; ok {
			return cfnSub(sub, params)
		}
		for k := range x {
			return "", fmt.Errorf("intrinsic %s cannot be evaluated before deployment", k)
		}
	}
	return "", fmt.Errorf("want a string, got %T", v)
}

func cfnSub(v any, params map[string]string) (string, error) {
	tmpl, ok := v.(string)
	vars := params
	if !ok {
		l := asList(v)
		if len(l) != 2 {
			return "", errors.New("Fn::Sub wants a string or [string, variables]")
		}
		if tmpl, ok = l[0].(string); !ok {
			return "", errors.New("Fn::Sub: first element must be a string")
		}
		vars = map[string]string{}
		for k, p := range params {
			vars[k] = p
		}
		for k, x := range asMap(l[1]) {
			s, err := cfnString(x, params)
			if err != nil {
				return "", fmt.Errorf("Fn::Sub variable %s: %w", k, err)
			}
			vars[k] = s
		}
	}
	var err error
	out := subVar.ReplaceAllStringFunc(tmpl, func(m string) string {
		name := m[2 : len(m)-1]
		val, ok := vars[name]
		if !ok {
			err = fmt.Errorf("Fn::Sub: ${%s} is not a parameter or variable", name)
		}
		return val
	})
	// ${!Literal} escapes a literal ${Literal}.
	return strings.ReplaceAll(out, "${!", "${"), err
}
