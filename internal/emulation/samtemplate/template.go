// Package samtemplate loads the AWS SAM template (template.yaml) and checks
// it the way `sam build` and CloudFormation would, but offline: against AWS's
// own JSON Schema for SAM, and against the files it names (code folders,
// state machine definitions, Makefile targets) and the resources it refers
// to. A template that passes here can still be refused by a deployment for
// account-level reasons, but not for a typo, a dangling reference or a
// state machine that may not invoke the function it calls.
package samtemplate

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/sandstep/sandstep/internal/emulation/cfn"
)

// Template is a parsed SAM template with every intrinsic function in its
// long form ({"Ref": x}, {"Fn::GetAtt": [res, attr]}, {"Fn::Sub": s}...), so
// callers see one representation whichever form the file used.
type Template struct {
	// Path is the file the template was loaded from.
	Path string
	// Dir is the folder relative paths in the template (CodeUri,
	// DefinitionUri, Metadata.ContextPath...) resolve against, as sam does.
	Dir string
	// Doc is the whole template: maps, lists, strings, bools, ints, floats.
	Doc map[string]any
}

// Load reads and parses the template at path.
func Load(path string) (*Template, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read template: %w", err)
	}
	doc, err := Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("template path: %w", err)
	}
	return &Template{Path: abs, Dir: filepath.Dir(abs), Doc: doc}, nil
}

// Parse decodes a template; see cfn.Parse.
func Parse(data []byte) (map[string]any, error) { return cfn.Parse(data) }

// Resources returns the template's resources by logical id.
func (t *Template) Resources() map[string]map[string]any {
	out := map[string]map[string]any{}
	for id, r := range asMap(t.Doc["Resources"]) {
		out[id] = asMap(r)
	}
	return out
}

// Property returns a resource property, falling back to the Globals section
// of its SAM type (Globals.Function for AWS::Serverless::Function...), which
// is where SAM takes properties a resource does not set.
func (t *Template) Property(logicalID, name string) (any, bool) {
	res := asMap(asMap(t.Doc["Resources"])[logicalID])
	if v, ok := asMap(res["Properties"])[name]; ok {
		return v, true
	}
	typ, _ := res["Type"].(string)
	section, ok := strings.CutPrefix(typ, "AWS::Serverless::")
	if !ok {
		return nil, false
	}
	v, ok := asMap(asMap(t.Doc["Globals"])[section])[name]
	return v, ok
}

func asMap(v any) map[string]any {
	m, _ := v.(map[string]any)
	return m
}

func asList(v any) []any {
	l, _ := v.([]any)
	return l
}
