package store_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/sandstep/sandstep/internal/service/store"
	"github.com/sandstep/sandstep/internal/testkit/testddb"
)

func TestMain(m *testing.M) { os.Exit(testddb.RunTests(m)) }

// newStore returns a Store on tables of its own in the shared DynamoDB Local.
func newStore(t testing.TB, opts ...store.Option) (*store.Store, *testddb.TestEnv) {
	t.Helper()
	env := testddb.ForTests(t)
	return store.NewLocal(env.Endpoint, env.Prefix, opts...), env
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	t.Cleanup(cancel)
	return ctx
}
