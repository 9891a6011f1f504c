package store

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// The LLM tools' index lives in the docs table: documentation chunks of the
// session dependencies (pk DOC#<package>, sk <url>#<hash>), one META/DOCS
// item saying when the docs were last indexed and which generation of them
// is current, and the code modules sessions saved (pk MOD#<session key>,
// sk the module's path). Searching happens in memory (package docsearch);
// this file only stores and lists.

// DocsTableSuffix names the docs table: "${TablePrefix}docs".
const DocsTableSuffix = "docs"

// MaxDocItemBytes bounds one chunk or module item, well under DynamoDB's
// 400 KB item limit (text plus an embedding of a few thousand floats).
const MaxDocItemBytes = 350_000

const (
	docPrefix = "DOC#"
	modPrefix = "MOD#"
	metaPK    = "META"
	metaSK    = "DOCS"
)

func (s *Store) docsTable() *string { return aws.String(s.prefix + DocsTableSuffix) }

// DocChunk is one chunk of a dependency's documentation page.
type DocChunk struct {
	Package string
	URL     string
	// Hash is the hex SHA-256 of the chunk's title and text: an unchanged
	// chunk keeps its key, so re-indexing neither writes nor embeds it.
	Hash string
	// Title is the header path, such as "Linear SDK > Authentication".
	Title string
	Text  string
	// Ord is the chunk's position in its page.
	Ord int
	// Vector is the chunk's embedding by Model; nil when there is none.
	Vector    []float32
	Model     string
	IndexedAt time.Time
}

// Key is the chunk's sort key within its package.
func (c DocChunk) Key() string { return c.URL + "#" + c.Hash }

func docKey(pkg, key string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{"pk": avS(docPrefix + pkg), "sk": avS(key)}
}

// DocChunks returns every chunk of a package.
func (s *Store) DocChunks(ctx context.Context, pkg string) ([]DocChunk, error) {
	items, err := s.queryDocs(ctx, docPrefix+pkg)
	if err != nil {
		return nil, fmt.Errorf("doc chunks of %s: %w", pkg, err)
	}
	out := make([]DocChunk, 0, len(items))
	for _, it := range items {
		out = append(out, DocChunk{
			Package: pkg, URL: getS(it, "url"), Hash: getS(it, "hash"), Title: getS(it, "title"),
			Text: getS(it, "text"), Ord: int(getN(it, "ord")), Vector: getVector(it, "vec"),
			Model: getS(it, "model"), IndexedAt: getTime(it, "indexed_at"),
		})
	}
	return out, nil
}

// PutDocChunks writes chunks (new ones, or old ones with a new embedding).
// A chunk too large for an item is ErrTooLarge and nothing is written.
func (s *Store) PutDocChunks(ctx context.Context, chunks []DocChunk) error {
	reqs := make([]types.WriteRequest, 0, len(chunks))
	for _, c := range chunks {
		if err := checkID("doc package", c.Package); err != nil {
			return err
		}
		item := docKey(c.Package, c.Key())
		item["url"] = avS(c.URL)
		item["hash"] = avS(c.Hash)
		item["title"] = avS(c.Title)
		item["text"] = avS(c.Text)
		item["ord"] = avN(int64(c.Ord))
		item["indexed_at"] = avTime(c.IndexedAt)
		if len(c.Vector) > 0 {
			item["vec"] = avVector(c.Vector)
			item["model"] = avS(c.Model)
		}
		if n := itemSize(item); n > MaxDocItemBytes {
			return fmt.Errorf("doc chunk %s of %s is %d bytes, more than %d: %w", c.Key(), c.Package, n, MaxDocItemBytes, ErrTooLarge)
		}
		reqs = append(reqs, types.WriteRequest{PutRequest: &types.PutRequest{Item: item}})
	}
	if err := s.batchWrite(ctx, *s.docsTable(), reqs); err != nil {
		return fmt.Errorf("put doc chunks: %w", err)
	}
	return nil
}

// DeleteDocChunks deletes chunks of a package by key.
func (s *Store) DeleteDocChunks(ctx context.Context, pkg string, keys []string) error {
	reqs := make([]types.WriteRequest, 0, len(keys))
	for _, k := range keys {
		reqs = append(reqs, types.WriteRequest{DeleteRequest: &types.DeleteRequest{Key: docKey(pkg, k)}})
	}
	if err := s.batchWrite(ctx, *s.docsTable(), reqs); err != nil {
		return fmt.Errorf("delete doc chunks of %s: %w", pkg, err)
	}
	return nil
}

// DeleteDocPackage deletes every chunk of a package.
func (s *Store) DeleteDocPackage(ctx context.Context, pkg string) error {
	items, err := s.queryDocs(ctx, docPrefix+pkg)
	if err != nil {
		return fmt.Errorf("delete docs of %s: %w", pkg, err)
	}
	keys := make([]string, 0, len(items))
	for _, it := range items {
		keys = append(keys, getS(it, "sk"))
	}
	return s.DeleteDocChunks(ctx, pkg, keys)
}

// DocsMeta says which generation of the docs index is current and when it
// was built; the zero value means never.
type DocsMeta struct {
	// Generation grows whenever an indexing changed a chunk: processes
	// holding the index in memory reload when it moves.
	Generation int64
	IndexedAt  time.Time
	// Fingerprint identifies the settings the index was built with
	// (packages, URLs, chunk size, embedding model); a change makes the
	// next indexing due at once.
	Fingerprint string
	// Packages were indexed; a package no longer configured is deleted.
	Packages []string
	// Failures are what the last indexing could not do (a page not
	// fetched, embeddings not made), for operators to see.
	Failures   []DocsFailure
	LeaseOwner string
	LeaseUntil time.Time
}

func metaKey() map[string]types.AttributeValue {
	return map[string]types.AttributeValue{"pk": avS(metaPK), "sk": avS(metaSK)}
}

// GetDocsMeta reads the index's META item (strongly consistent).
func (s *Store) GetDocsMeta(ctx context.Context) (DocsMeta, error) {
	out, err := s.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: s.docsTable(), Key: metaKey(), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return DocsMeta{}, fmt.Errorf("get docs meta: %w", err)
	}
	return metaFromItem(out.Item), nil
}

// ClaimDocsIndex takes the indexing lease for owner until now+lease, unless
// another owner holds an unexpired one (ErrConflict). The lease keeps two
// schedulers from fetching and embedding the same pages at once.
func (s *Store) ClaimDocsIndex(ctx context.Context, owner string, now time.Time, lease time.Duration) (DocsMeta, error) {
	e := newExpr()
	e.set("lease_owner", avS(owner))
	e.set("lease_until", avTime(now.Add(lease)))
	e.cond("(attribute_not_exists(" + e.name("lease_until") + ") OR " + e.name("lease_until") + " < " + e.value(avTime(now)) +
		" OR " + e.name("lease_owner") + " = " + e.value(avS(owner)) + ")")
	out, err := s.db.UpdateItem(ctx, e.update(*s.docsTable(), metaKey()))
	if err != nil {
		if old, ok := isConditionFailed(err); ok {
			m := metaFromItem(old)
			return m, fmt.Errorf("docs index leased by %s until %s: %w", m.LeaseOwner, m.LeaseUntil.Format(time.RFC3339), ErrConflict)
		}
		return DocsMeta{}, fmt.Errorf("claim docs index: %w", err)
	}
	return metaFromItem(out.Attributes), nil
}

// DocsFailure is one thing an indexing could not do.
type DocsFailure struct {
	Package string `json:"package"`
	URL     string `json:"url,omitempty"`
	Error   string `json:"error"`
}

// maxDocsFailures bounds the failures kept in the META item.
const maxDocsFailures = 100

// FinishDocsIndex records an indexing by owner and lets the lease go; a
// changed index moves to the next generation.
func (s *Store) FinishDocsIndex(ctx context.Context, owner string, now time.Time, fingerprint string, packages []string, failures []DocsFailure, changed bool) (DocsMeta, error) {
	e := newExpr()
	e.set("indexed_at", avTime(now))
	e.set("fingerprint", avS(fingerprint))
	e.set("packages", avStrList(packages))
	fl := make([]types.AttributeValue, 0, min(len(failures), maxDocsFailures))
	for _, f := range failures[:min(len(failures), maxDocsFailures)] {
		fl = append(fl, &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{
			"package": avS(f.Package), "url": avS(f.URL), "error": avS(truncate(f.Error, 1000)),
		}})
	}
	e.set("failures", &types.AttributeValueMemberL{Value: fl})
	e.remove("lease_owner")
	e.remove("lease_until")
	var inc int64
	if changed {
		inc = 1
	}
	e.add("generation", avN(inc))
	e.cond(e.name("lease_owner") + " = " + e.value(avS(owner)))
	out, err := s.db.UpdateItem(ctx, e.update(*s.docsTable(), metaKey()))
	if err != nil {
		if _, ok := isConditionFailed(err); ok {
			return DocsMeta{}, fmt.Errorf("finish docs index: the lease of %s was lost: %w", owner, ErrConflict)
		}
		return DocsMeta{}, fmt.Errorf("finish docs index: %w", err)
	}
	return metaFromItem(out.Attributes), nil
}

// ReleaseDocsIndex lets go of owner's lease without recording an
// indexing (it failed or was stopped), so the next scheduler need not wait
// for the lease to expire. A lease owner no longer holds is left alone.
func (s *Store) ReleaseDocsIndex(ctx context.Context, owner string) error {
	e := newExpr()
	e.remove("lease_owner")
	e.remove("lease_until")
	e.cond(e.name("lease_owner") + " = " + e.value(avS(owner)))
	_, err := s.db.UpdateItem(ctx, e.update(*s.docsTable(), metaKey()))
	if _, lost := isConditionFailed(err); err != nil && !lost {
		return fmt.Errorf("release docs index: %w", err)
	}
	return nil
}

func metaFromItem(it map[string]types.AttributeValue) DocsMeta {
	return DocsMeta{
		Generation: getN(it, "generation"), IndexedAt: getTime(it, "indexed_at"), Fingerprint: getS(it, "fingerprint"),
		Packages: getStrList(it, "packages"), Failures: getFailures(it), LeaseOwner: getS(it, "lease_owner"), LeaseUntil: getTime(it, "lease_until"),
	}
}

func getFailures(it map[string]types.AttributeValue) []DocsFailure {
	l, ok := it["failures"].(*types.AttributeValueMemberL)
	if !ok {
		return nil
	}
	out := make([]DocsFailure, 0, len(l.Value))
	for _, v := range l.Value {
		if m, ok := v.(*types.AttributeValueMemberM); ok {
			out = append(out, DocsFailure{Package: getS(m.Value, "package"), URL: getS(m.Value, "url"), Error: getS(m.Value, "error")})
		}
	}
	return out
}

// CodeModule is the index entry of a module a session saved in its volume:
// what it is for and how to use it, never its source (the volume holds it).
type CodeModule struct {
	// Session is the session's internal key; SessionCreatedAt tells which
	// life of it wrote the entry, since a deleted session's id may be used
	// again with a new, empty volume.
	Session          string
	SessionCreatedAt time.Time
	Path             string
	Description      string
	Exports          []string
	Usage            string
	Vector           []float32
	Model            string
	UpdatedAt        time.Time
}

func modKey(session, path string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{"pk": avS(modPrefix + session), "sk": avS(path)}
}

// PutCodeModules upserts modules by path. Each expires after the retention
// as a backstop; the session's deletion removes them first.
func (s *Store) PutCodeModules(ctx context.Context, mods []CodeModule) error {
	reqs := make([]types.WriteRequest, 0, len(mods))
	for _, m := range mods {
		if err := checkID("session id", m.Session); err != nil {
			return err
		}
		if err := checkID("module path", m.Path); err != nil {
			return err
		}
		item := modKey(m.Session, m.Path)
		item["session_created_at"] = avTime(m.SessionCreatedAt)
		item["description"] = avS(m.Description)
		item["exports"] = avStrList(m.Exports)
		item["usage"] = avS(m.Usage)
		item["updated_at"] = avTime(m.UpdatedAt)
		item["expires_at"] = s.expiry(m.UpdatedAt)
		if len(m.Vector) > 0 {
			item["vec"] = avVector(m.Vector)
			item["model"] = avS(m.Model)
		}
		if n := itemSize(item); n > MaxDocItemBytes {
			return fmt.Errorf("code module %s is %d bytes, more than %d: %w", m.Path, n, MaxDocItemBytes, ErrTooLarge)
		}
		reqs = append(reqs, types.WriteRequest{PutRequest: &types.PutRequest{Item: item}})
	}
	if err := s.batchWrite(ctx, *s.docsTable(), reqs); err != nil {
		return fmt.Errorf("put code modules: %w", err)
	}
	return nil
}

// CodeModules returns a session's modules, by path.
func (s *Store) CodeModules(ctx context.Context, session string) ([]CodeModule, error) {
	items, err := s.queryDocs(ctx, modPrefix+session)
	if err != nil {
		return nil, fmt.Errorf("code modules of %s: %w", session, err)
	}
	out := make([]CodeModule, 0, len(items))
	for _, it := range items {
		out = append(out, CodeModule{
			Session: session, SessionCreatedAt: getTime(it, "session_created_at"), Path: getS(it, "sk"),
			Description: getS(it, "description"), Exports: getStrList(it, "exports"), Usage: getS(it, "usage"),
			Vector: getVector(it, "vec"), Model: getS(it, "model"), UpdatedAt: getTime(it, "updated_at"),
		})
	}
	return out, nil
}

// DeleteCodeModules deletes a session's modules by path; deleting what is
// not there is not an error.
func (s *Store) DeleteCodeModules(ctx context.Context, session string, paths []string) error {
	reqs := make([]types.WriteRequest, 0, len(paths))
	for _, p := range paths {
		reqs = append(reqs, types.WriteRequest{DeleteRequest: &types.DeleteRequest{Key: modKey(session, p)}})
	}
	if err := s.batchWrite(ctx, *s.docsTable(), reqs); err != nil {
		return fmt.Errorf("delete code modules of %s: %w", session, err)
	}
	return nil
}

// DeleteSessionModules deletes every module entry of a session: its
// volume is gone.
func (s *Store) DeleteSessionModules(ctx context.Context, session string) error {
	items, err := s.queryDocs(ctx, modPrefix+session)
	if err != nil {
		return fmt.Errorf("delete code modules of %s: %w", session, err)
	}
	paths := make([]string, 0, len(items))
	for _, it := range items {
		paths = append(paths, getS(it, "sk"))
	}
	return s.DeleteCodeModules(ctx, session, paths)
}

// queryDocs returns every item of a docs table partition (strongly
// consistent).
func (s *Store) queryDocs(ctx context.Context, pk string) ([]map[string]types.AttributeValue, error) {
	var items []map[string]types.AttributeValue
	p := dynamodb.NewQueryPaginator(s.db, &dynamodb.QueryInput{
		TableName:                 s.docsTable(),
		KeyConditionExpression:    aws.String("pk = :pk"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":pk": avS(pk)},
		ConsistentRead:            aws.Bool(true),
	})
	for p.HasMorePages() {
		out, err := p.NextPage(ctx)
		if err != nil {
			return nil, err
		}
		items = append(items, out.Items...)
	}
	return items, nil
}

// avVector stores a vector as little-endian float32s: a quarter of the
// size of a list of numbers, and read without parsing.
func avVector(v []float32) types.AttributeValue {
	b := make([]byte, 4*len(v))
	for i, f := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(f))
	}
	return &types.AttributeValueMemberB{Value: b}
}

func getVector(it map[string]types.AttributeValue, k string) []float32 {
	b, ok := it[k].(*types.AttributeValueMemberB)
	if !ok || len(b.Value) == 0 || len(b.Value)%4 != 0 {
		return nil
	}
	v := make([]float32, len(b.Value)/4)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b.Value[4*i:]))
	}
	return v
}

func avStrList(vs []string) types.AttributeValue {
	l := make([]types.AttributeValue, len(vs))
	for i, v := range vs {
		l[i] = avS(v)
	}
	return &types.AttributeValueMemberL{Value: l}
}

func getStrList(it map[string]types.AttributeValue, k string) []string {
	l, ok := it[k].(*types.AttributeValueMemberL)
	if !ok {
		return nil
	}
	out := make([]string, 0, len(l.Value))
	for _, v := range l.Value {
		if s, ok := v.(*types.AttributeValueMemberS); ok {
			out = append(out, s.Value)
		}
	}
	return out
}

// itemSize approximates DynamoDB's item size: names plus values.
func itemSize(it map[string]types.AttributeValue) int {
	n := 0
	for k, v := range it {
		n += len(k)
		switch v := v.(type) {
		case *types.AttributeValueMemberS:
			n += len(v.Value)
		case *types.AttributeValueMemberB:
			n += len(v.Value)
		case *types.AttributeValueMemberL:
			for _, e := range v.Value {
				if s, ok := e.(*types.AttributeValueMemberS); ok {
					n += len(s.Value) + 1
				}
			}
		default:
			n += 21
		}
	}
	return n
}
