// Package testddb gives each test its own tables on one shared DynamoDB Local.
package testddb

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/sandstep/sandstep/internal/emulation/ddblocal"
)

var shared struct {
	once sync.Once
	inst *ddblocal.Instance
	err  error
}

// Shared returns the one in-memory instance of this process, starting it on
// first use. RunTests stops it; on Linux it also dies with the process.
func Shared() (*ddblocal.Instance, error) {
	shared.once.Do(func() {
		shared.inst, shared.err = ddblocal.Start(context.Background(), ddblocal.Options{})
	})
	return shared.inst, shared.err
}

// RunTests runs a test binary's tests and then stops the shared instance if
// one was started:
//
//	func TestMain(m *testing.M) { os.Exit(testddb.RunTests(m)) }
func RunTests(m *testing.M) int {
	code := m.Run()
	if shared.inst != nil {
		if err := shared.inst.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			if code == 0 {
				code = 1
			}
		}
	}
	return code
}

// TestEnv is one test's view of the shared instance: its own tables.
type TestEnv struct {
	Endpoint string
	Client   *dynamodb.Client
	// Prefix is unique to the test; its tables are named Prefix+"jobs" etc.
	Prefix string
}

var testSeq atomic.Int64

// ForTests gives t its own set of tables, created from template.yaml under a
// prefix unique to t, on the shared instance, and deletes them when t ends.
//
// Without java or the jar the test is skipped, or fails when CI=true:
// in CI a missing dependency must never pass silently.
func ForTests(t testing.TB) *TestEnv {
	t.Helper()
	inst, err := Shared()
	if err != nil {
		if (errors.Is(err, ddblocal.ErrJavaMissing) || errors.Is(err, ddblocal.ErrJarMissing)) && os.Getenv("CI") != "true" {
			t.Skipf("DynamoDB Local unavailable: %v", err)
		}
		t.Fatalf("DynamoDB Local: %v", err)
	}
	tmpl, err := ddblocal.FindTemplate()
	if err != nil {
		t.Fatal(err)
	}
	env := &TestEnv{
		Endpoint: inst.Endpoint(),
		Client:   inst.Client(),
		Prefix:   testPrefix(t.Name()),
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := ddblocal.CreateTables(ctx, env.Client, tmpl, env.Prefix); err != nil {
		t.Fatalf("create tables: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := ddblocal.DeleteTables(ctx, env.Client, tmpl, env.Prefix); err != nil {
			t.Errorf("delete tables: %v", err)
		}
	})
	return env
}

// testPrefix makes a table prefix unique within the process and readable in
// DynamoDB Local's table list: "t<n>-<test name>-".
func testPrefix(name string) string {
	var b strings.Builder
	for _, r := range name {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
		if b.Len() >= 60 {
			break
		}
	}
	return fmt.Sprintf("t%d-%s-", testSeq.Add(1), b.String())
}
