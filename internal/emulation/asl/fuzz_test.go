package asl

import (
	"errors"
	"testing"
)

// FuzzLoad loads arbitrary JSON as a definition: it never panics, and it
// either gives a machine or refuses with *DefinitionError values that say
// why, never both and never neither.
func FuzzLoad(f *testing.F) {
	subs := map[string]string{}
	for _, name := range []string{"FnArn", "DiscoverFunctionArn", "ProvisionFunctionArn", "CrawlFunctionArn", "SummarizeFunctionArn", "ReportFunctionArn", "CleanupFunctionArn"} {
		subs[name] = fnA
	}
	f.Fuzz(func(t *testing.T, def []byte) {
		m, err := Load(def, LoadOptions{Substitutions: subs})
		switch {
		case err == nil && m == nil:
			t.Fatal("Load returned neither a machine nor an error")
		case err != nil && m != nil:
			t.Fatalf("Load returned a machine and an error: %v", err)
		case err != nil:
			if !allDefinitionErrors(err) {
				t.Fatalf("Load refused with %T, not *DefinitionError: %v", err, err)
			}
			if err.Error() == "" {
				t.Fatal("Load refused without saying why")
			}
		}
	})
}

// allDefinitionErrors reports whether err is a *DefinitionError or a join
// of them.
func allDefinitionErrors(err error) bool {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range j.Unwrap() {
			if !allDefinitionErrors(e) {
				return false
			}
		}
		return len(j.Unwrap()) > 0
	}
	var de *DefinitionError
	return errors.As(err, &de)
}
