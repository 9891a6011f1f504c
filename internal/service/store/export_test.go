package store

import (
	"context"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
)

// SessionEventsExpiry reads the TTL of a session's event list.
func (s *Store) SessionEventsExpiry(ctx context.Context, key string) (int64, error) {
	out, err := s.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: &s.sessions, Key: eventsKey(key), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return 0, err
	}
	return getN(out.Item, "expires_at"), nil
}
