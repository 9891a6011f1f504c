package samtemplate_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandstep/sandstep/internal/emulation/samtemplate"
)

func TestRepoTemplateMatchesSAMSchema(t *testing.T) {
	s := loadSchema(t)
	if err := s.Validate(loadRepoTemplate(t).Doc); err != nil {
		t.Fatalf("template.yaml does not match the SAM schema:\n%v", err)
	}
}

// The schema must refuse what SAM refuses, and say where: a mutation of the
// real template per case.
func TestSchemaRefusesMistakes(t *testing.T) {
	s := loadSchema(t)
	for name, tc := range map[string]struct {
		mutate  func(t *testing.T, doc map[string]any)
		want    []string
		notWant []string
	}{
		"misspelt function property": {
			mutate: func(t *testing.T, doc map[string]any) {
				mapAt(t, doc, "Resources", "ApiFunction", "Properties")["Timout"] = 29
			},
			want: []string{"resource ApiFunction (AWS::Serverless::Function)", "Timout"},
		},
		"unknown Globals section": {
			mutate: func(t *testing.T, doc map[string]any) {
				mapAt(t, doc, "Globals")["Functions"] = map[string]any{"Timeout": 3}
			},
			want: []string{"Functions"},
		},
		"substitutions not a mapping": {
			mutate: func(t *testing.T, doc map[string]any) {
				mapAt(t, doc, "Resources", "DeepResearchStateMachine", "Properties")["DefinitionSubstitutions"] = []any{"DiscoverFunctionArn"}
			},
			want: []string{"resource DeepResearchStateMachine (AWS::Serverless::StateMachine)", "/Properties/DefinitionSubstitutions"},
		},
		"HttpApi event without its required shape": {
			mutate: func(t *testing.T, doc map[string]any) {
				ev := mapAt(t, doc, "Resources", "ApiFunction", "Properties", "Events", "Health")
				ev["Properties"].(map[string]any)["Verb"] = "GET"
			},
			want: []string{"resource ApiFunction", "/Properties/Events/Health/Properties", "'Verb' not allowed"},
			// Only the HttpApi alternative explains it.
			notWant: []string{"value must be 'S3'", "missing property 'Topic'"},
		},
		"layer without ContentUri": {
			mutate: func(t *testing.T, doc map[string]any) {
				delete(mapAt(t, doc, "Resources", "ProvidersLayer", "Properties"), "ContentUri")
			},
			want: []string{"resource ProvidersLayer (AWS::Serverless::LayerVersion)", "ContentUri"},
		},
	} {
		t.Run(name, func(t *testing.T) {
			tpl := loadRepoTemplate(t)
			tc.mutate(t, tpl.Doc)
			err := s.Validate(tpl.Doc)
			if err == nil {
				t.Fatal("Validate accepted the broken template")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not mention %q:\n%v", w, err)
				}
			}
			for _, w := range tc.notWant {
				if strings.Contains(err.Error(), w) {
					t.Errorf("error mentions %q, an alternative that does not apply:\n%v", w, err)
				}
			}
		})
	}
}

// The schema's "^(?!AWS::Serverless::).+$" pattern needs lookahead: with
// ECMAScript regexps a serverless type that no SAM schema matches must fail
// rather than pass as a plain CloudFormation resource.
func TestSchemaLookaheadPattern(t *testing.T) {
	s := loadSchema(t)
	doc, err := samtemplate.Parse([]byte("Resources:\n  X:\n    Type: AWS::Serverless::Nonsense\n    Properties: {}\n  Y:\n    Type: AWS::SNS::Topic\n"))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Validate(doc); err == nil {
		t.Fatal("AWS::Serverless::Nonsense passed the schema")
	}
	delete(doc["Resources"].(map[string]any), "X")
	if err := s.Validate(doc); err != nil {
		t.Fatalf("a plain CloudFormation resource failed the schema: %v", err)
	}
}

func TestLoadSchemaErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := samtemplate.LoadSchema(filepath.Join(dir, "missing.json")); err == nil {
		t.Error("LoadSchema of a missing file succeeded")
	}
	p := filepath.Join(dir, "empty.json")
	if err := os.WriteFile(p, []byte(`{"type": "object"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := samtemplate.LoadSchema(p); err == nil || !strings.Contains(err.Error(), "no resource types") {
		t.Errorf("LoadSchema of a schema without SAM resources: err = %v", err)
	}
}

func TestSchemaPathEnv(t *testing.T) {
	t.Setenv(samtemplate.SchemaEnv, "/x/sam.schema.json")
	if got := samtemplate.SchemaPath("/repo"); got != "/x/sam.schema.json" {
		t.Errorf("SchemaPath = %s, want the environment's", got)
	}
	t.Setenv(samtemplate.SchemaEnv, "")
	if got := samtemplate.SchemaPath("/work/main"); got != "/work/shared/schemas/sam.schema.json" {
		t.Errorf("SchemaPath = %s, want shared/ beside the repository", got)
	}
}
