package ddblocal

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// A table made by an older template.yaml may lack an index the template
// has since gained (by-tenant, for the listings). CreateTables adds it in
// place, as a CloudFormation stack update would, rather than asking for
// the table, and the data in it, to be deleted. Every other difference is
// still refused.

// missingIndexes returns the template's global secondary indexes that the
// existing table does not have.
func missingIndexes(want *dynamodb.CreateTableInput, have *types.TableDescription) []types.GlobalSecondaryIndex {
	var out []types.GlobalSecondaryIndex
	for _, g := range want.GlobalSecondaryIndexes {
		if !slices.ContainsFunc(have.GlobalSecondaryIndexes, func(h types.GlobalSecondaryIndexDescription) bool {
			return aws.ToString(h.IndexName) == aws.ToString(g.IndexName)
		}) {
			out = append(out, g)
		}
	}
	return out
}

// withIndexes is have as it will be once the missing indexes are added.
func withIndexes(have *types.TableDescription, missing []types.GlobalSecondaryIndex) *types.TableDescription {
	t := *have
	t.GlobalSecondaryIndexes = slices.Clone(have.GlobalSecondaryIndexes)
	for _, g := range missing {
		t.GlobalSecondaryIndexes = append(t.GlobalSecondaryIndexes, types.GlobalSecondaryIndexDescription{
			IndexName: g.IndexName, KeySchema: g.KeySchema, Projection: g.Projection,
		})
	}
	return &t
}

// addIndexes creates the missing indexes one at a time (DynamoDB takes one
// per UpdateTable) and waits for each to be active.
func addIndexes(ctx context.Context, client *dynamodb.Client, want *dynamodb.CreateTableInput, missing []types.GlobalSecondaryIndex) error {
	name := aws.ToString(want.TableName)
	for _, g := range missing {
		var attrs []types.AttributeDefinition
		for _, k := range g.KeySchema {
			for _, a := range want.AttributeDefinitions {
				if aws.ToString(a.AttributeName) == aws.ToString(k.AttributeName) {
					attrs = append(attrs, a)
				}
			}
		}
		_, err := client.UpdateTable(ctx, &dynamodb.UpdateTableInput{
			TableName:            want.TableName,
			AttributeDefinitions: attrs,
			GlobalSecondaryIndexUpdates: []types.GlobalSecondaryIndexUpdate{{Create: &types.CreateGlobalSecondaryIndexAction{
				IndexName: g.IndexName, KeySchema: g.KeySchema, Projection: g.Projection, ProvisionedThroughput: g.ProvisionedThroughput,
			}}},
		})
		if err != nil {
			return fmt.Errorf("add index %s to table %s: %w", aws.ToString(g.IndexName), name, err)
		}
		if err := waitIndex(ctx, client, name, aws.ToString(g.IndexName)); err != nil {
			return err
		}
	}
	return nil
}

// waitIndex waits, up to two minutes, for an index to be active.
func waitIndex(ctx context.Context, client *dynamodb.Client, table, index string) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for delay := 50 * time.Millisecond; ; delay = min(2*delay, time.Second) {
		out, err := client.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(table)})
		if err != nil {
			return fmt.Errorf("wait for index %s of %s: %w", index, table, err)
		}
		for _, g := range out.Table.GlobalSecondaryIndexes {
			if aws.ToString(g.IndexName) == index && g.IndexStatus == types.IndexStatusActive {
				return nil
			}
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("wait for index %s of %s: %w", index, table, ctx.Err())
		case <-t.C:
		}
	}
}
