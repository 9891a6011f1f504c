package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// The dependency snapshots a deployment built, for providers that cannot
// list snapshots by label (Deno, Modal): without this record nothing could
// ever find an old one to delete. One item per deployment in the sessions
// table, an attribute per snapshot holding when it was built; it changes
// only when a snapshot is built or deleted, so one item is no hot key.

// snapshotAttr prefixes a snapshot's attribute; the slug follows.
const snapshotAttr = "snap:"

func snapshotsKey(deployment string) map[string]types.AttributeValue {
	// Session keys are "s-" and 26 base32 characters: no session has it.
	return sessionKey("snapshots#" + deployment)
}

// RecordSnapshot records that deployment has the snapshot slug, built at
// built. A snapshot found already there keeps the time first recorded
// (some providers report none, and a time moved by every process that
// finds the current snapshot would keep its predecessors from ever being
// due); one built now (rebuilt) takes the new time, which a deletion in
// flight then sees (ForgetSnapshot).
func (s *Store) RecordSnapshot(ctx context.Context, deployment, slug string, built time.Time, rebuilt bool) error {
	update := "SET #s = if_not_exists(#s, :t)"
	if rebuilt {
		update = "SET #s = :t"
	}
	_, err := s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 &s.sessions,
		Key:                       snapshotsKey(deployment),
		UpdateExpression:          aws.String(update),
		ExpressionAttributeNames:  map[string]string{"#s": snapshotAttr + slug},
		ExpressionAttributeValues: map[string]types.AttributeValue{":t": avN(built.UnixMilli())},
	})
	if err != nil {
		return fmt.Errorf("record snapshot %s: %w", slug, err)
	}
	return nil
}

// Snapshots are the snapshots RecordSnapshot recorded for deployment and
// ForgetSnapshot has not removed, by slug, with when each was built.
func (s *Store) Snapshots(ctx context.Context, deployment string) (map[string]time.Time, error) {
	out, err := s.db.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: &s.sessions, Key: snapshotsKey(deployment), ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return nil, fmt.Errorf("snapshots of %s: %w", deployment, err)
	}
	snaps := map[string]time.Time{}
	for k := range out.Item {
		if slug, ok := strings.CutPrefix(k, snapshotAttr); ok {
			snaps[slug] = time.UnixMilli(getN(out.Item, k)).UTC()
		}
	}
	return snaps, nil
}

// ForgetSnapshot removes slug from deployment's record once it is deleted,
// if its time is still built (as Snapshots read it): a process that built
// it again meanwhile recorded a new time, and the rebuilt snapshot stays
// recorded, to be collected later.
func (s *Store) ForgetSnapshot(ctx context.Context, deployment, slug string, built time.Time) error {
	_, err := s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 &s.sessions,
		Key:                       snapshotsKey(deployment),
		UpdateExpression:          aws.String("REMOVE #s"),
		ConditionExpression:       aws.String("#s = :t"),
		ExpressionAttributeNames:  map[string]string{"#s": snapshotAttr + slug},
		ExpressionAttributeValues: map[string]types.AttributeValue{":t": avN(built.UnixMilli())},
	})
	var cf *types.ConditionalCheckFailedException
	if errors.As(err, &cf) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("forget snapshot %s: %w", slug, err)
	}
	return nil
}
