package store

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Artifact is a file a job produced, kept with the job (an agent run's
// /workspace/artifacts) so that it outlives the sandbox.
type Artifact struct {
	// Path is relative to the folder it was collected from ("report.md",
	// "charts/a.png").
	Path        string
	ContentType string
	Size        int64
	// Data is the content; empty in listings.
	Data []byte
	At   time.Time
}

// MaxArtifactBytes bounds one artifact: it is one item, which DynamoDB caps
// at 400 KB.
const MaxArtifactBytes = 256 << 10

const skArtifactPrefix = "ARTIFACT#"

func artifactKey(jobID, path string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{"pk": avS(jobID), "sk": avS(skArtifactPrefix + path)}
}

// PutArtifact stores (or replaces) an artifact of the job; a retried
// collect writes the same item again.
func (s *Store) PutArtifact(ctx context.Context, jobID string, a Artifact) error {
	if a.Path == "" || len(a.Path) > 1024 || strings.ContainsRune(a.Path, 0) {
		return fmt.Errorf("artifact path %q: %w", a.Path, ErrInvalid)
	}
	if len(a.Data) > MaxArtifactBytes {
		return fmt.Errorf("artifact %s is %d bytes, limit %d: %w", a.Path, len(a.Data), MaxArtifactBytes, ErrTooLarge)
	}
	now := s.now()
	item := artifactKey(jobID, a.Path)
	item["path"] = avS(a.Path)
	item["content_type"] = avS(a.ContentType)
	item["size"] = avN(int64(len(a.Data)))
	item["data"] = &types.AttributeValueMemberB{Value: a.Data}
	item["at"] = avTime(now)
	item["expires_at"] = s.expiry(now)
	if _, err := s.db.PutItem(ctx, &dynamodb.PutItemInput{TableName: &s.jobs, Item: item}); err != nil {
		return fmt.Errorf("put artifact %s of job %s: %w", a.Path, jobID, err)
	}
	return nil
}

// Artifacts lists the job's artifacts by path, without their content.
func (s *Store) Artifacts(ctx context.Context, jobID string) ([]Artifact, error) {
	var list []Artifact
	var start map[string]types.AttributeValue
	for {
		out, err := s.db.Query(ctx, &dynamodb.QueryInput{
			TableName:              &s.jobs,
			KeyConditionExpression: aws.String("pk = :pk AND begins_with(sk, :p)"),
			ExpressionAttributeValues: map[string]types.AttributeValue{
				":pk": avS(jobID), ":p": avS(skArtifactPrefix),
			},
			ProjectionExpression: aws.String("#p, content_type, #s, #a"),
			ExpressionAttributeNames: map[string]string{
				"#p": "path", "#s": "size", "#a": "at",
			},
			ConsistentRead:    aws.Bool(true),
			ExclusiveStartKey: start,
		})
		if err != nil {
			return nil, fmt.Errorf("list artifacts of job %s: %w", jobID, err)
		}
		for _, it := range out.Items {
			list = append(list, artifactFromItem(it))
		}
		if len(out.LastEvaluatedKey) == 0 {
			return list, nil
		}
		start = out.LastEvaluatedKey
	}
}

// GetArtifact reads one artifact with its content; ErrNotFound when the job
// has none at path.
func (s *Store) GetArtifact(ctx context.Context, jobID, path string) (Artifact, error) {
	out, err := s.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: &s.jobs, Key: artifactKey(jobID, path), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return Artifact{}, fmt.Errorf("get artifact %s of job %s: %w", path, jobID, err)
	}
	if len(out.Item) == 0 {
		return Artifact{}, fmt.Errorf("artifact %s of job %s: %w", path, jobID, ErrNotFound)
	}
	a := artifactFromItem(out.Item)
	if b, ok := out.Item["data"].(*types.AttributeValueMemberB); ok {
		a.Data = b.Value
	}
	return a, nil
}

func artifactFromItem(it map[string]types.AttributeValue) Artifact {
	return Artifact{Path: getS(it, "path"), ContentType: getS(it, "content_type"), Size: getN(it, "size"), At: getTime(it, "at")}
}
