package sandboxes_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/sandstep/sandstep/internal/testkit/testbin"
)

// lifecycleCall matches the calls only this package may make: a provider's
// Create and Terminate, and the store's ledger methods (every one, reads
// included, so that no second package grows its own view of the protocol).
// CreateTable, CreateVolume and the like are other names and do not match;
// the ledger's types and constants (store.LedgerEntry, store.LedgerRunning)
// are selected from a package and are not calls.
var lifecycleCall = regexp.MustCompile(`^(Create|Terminate|Ledger[A-Z]\w*)$`)

// lifecycleCalls lists the lifecycle calls in one Go file: calls
// x.Create(...), x.Terminate(...), x.LedgerBegin(...)... on anything that is
// not an imported package (os.Create is a file). Fields such as
// Counts.LedgerReaped are not calls.
func lifecycleCalls(fset *token.FileSet, name string, src []byte) ([]string, error) {
	f, err := parser.ParseFile(fset, name, src, parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	imported := map[string]bool{}
	for _, imp := range f.Imports {
		path, _ := strconv.Unquote(imp.Path.Value)
		local := path[strings.LastIndex(path, "/")+1:]
		if imp.Name != nil {
			local = imp.Name.Name
		}
		imported[local] = true
	}
	var found []string
	ast.Inspect(f, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok {
			return true
		}
		sel, ok := call.Fun.(*ast.SelectorExpr)
		if !ok || !lifecycleCall.MatchString(sel.Sel.Name) {
			return true
		}
		if id, ok := sel.X.(*ast.Ident); ok && imported[id.Name] {
			return true
		}
		found = append(found, fset.Position(sel.Sel.Pos()).String()+": ."+sel.Sel.Name)
		return true
	})
	return found, nil
}

// The checker finds what it must and nothing else, so that the tree test
// below cannot pass by finding nothing.
func TestLifecycleCallsChecker(t *testing.T) {
	src := `package x

import (
	"os"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/sandstep/sandstep/internal/service/store"
)

func f(p Provider, st *Store, db *dynamodb.Client) {
	p.Create(ctx, spec)
	p.Terminate(ctx, id)
	c.LedgerReaped++
	st.LedgerBegin(ctx, e)
	st.LedgerClose(ctx, "n", "r", nil)
	st.LedgerListByOwner(ctx, "o")
	os.Create("file")
	db.CreateTable(ctx, nil)
	p.CreateVolume(ctx, v)
	_ = store.LedgerEntry{State: store.LedgerRunning}
	st.LedgerRunning(ctx, "n", "id")
	// p.Create(ctx, spec) in a comment is no call
}
`
	got, err := lifecycleCalls(token.NewFileSet(), "x.go", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"Create", "Terminate", "LedgerBegin", "LedgerClose", "LedgerListByOwner", "LedgerRunning"}
	if len(got) != len(want) {
		t.Fatalf("found %q, want the %d calls %v", got, len(want), want)
	}
	for i, w := range want {
		if !strings.HasSuffix(got[i], "."+w) {
			t.Fatalf("finding %d = %q, want .%s", i, got[i], w)
		}
	}
}

// Outside this package, the store (which defines the ledger) and the
// provider tree (plugins, their glue and the conformance suite), no non-test
// Go code creates or terminates a sandbox or touches the ledger.
func TestOnlyTheOwnerTouchesTheLifecycle(t *testing.T) {
	root, err := testbin.Root()
	if err != nil {
		t.Fatal(err)
	}
	allowed := []string{
		"providers" + string(filepath.Separator),
		filepath.Join("internal", "service", "sandboxes") + string(filepath.Separator),
		filepath.Join("internal", "service", "store") + string(filepath.Separator),
	}
	fset := token.NewFileSet()
	scanned := 0
	var found []string
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			base := d.Name()
			if rel != "." && (strings.HasPrefix(base, ".") || base == "testdata" || base == "node_modules" || base == "bin") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		for _, a := range allowed {
			if strings.HasPrefix(rel, a) {
				return nil
			}
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		scanned++
		calls, err := lifecycleCalls(fset, rel, src)
		if err != nil {
			return err
		}
		found = append(found, calls...)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if scanned < 100 {
		t.Fatalf("scanned %d files under %s; the walk missed the tree", scanned, root)
	}
	for _, f := range found {
		t.Errorf("%s: sandbox lifecycle outside internal/service/sandboxes (call the Manager)", f)
	}
}
