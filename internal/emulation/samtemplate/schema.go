package samtemplate

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/dlclark/regexp2"
	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
)

// SchemaEnv names the environment variable that overrides where the SAM
// JSON Schema is found.
const SchemaEnv = "SANDSTEP_SAM_SCHEMA"

// SchemaPath returns where the SAM JSON Schema is for the repository at
// repoRoot: $SANDSTEP_SAM_SCHEMA, or shared/schemas/sam.schema.json in the
// folder beside the repository (where CI puts shared/ next to its clone).
func SchemaPath(repoRoot string) string {
	if p := os.Getenv(SchemaEnv); p != "" {
		return p
	}
	return filepath.Join(repoRoot, "..", "shared", "schemas", "sam.schema.json")
}

// Schema is AWS's JSON Schema for SAM templates, compiled.
type Schema struct {
	root *jsonschema.Schema
	// byType holds the schema of each AWS::Serverless:: resource type, so
	// that a bad resource is reported against its own type and not as "none
	// of the 12 alternatives of Resources matched".
	byType map[string]*jsonschema.Schema
}

// LoadSchema compiles the SAM schema at path. Its patterns use lookaheads,
// which Go's regexp lacks, so they run on regexp2 in ECMAScript mode, the
// dialect JSON Schema specifies.
func LoadSchema(path string) (*Schema, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("schema path: %w", err)
	}
	raw, err := os.ReadFile(abs)
	if err != nil {
		return nil, fmt.Errorf("read SAM schema: %w", err)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("parse SAM schema %s: %w", abs, err)
	}
	c := jsonschema.NewCompiler()
	c.UseRegexpEngine(ecmaRegexp)
	if err := c.AddResource(abs, doc); err != nil {
		return nil, fmt.Errorf("SAM schema %s: %w", abs, err)
	}
	s := &Schema{byType: map[string]*jsonschema.Schema{}}
	if s.root, err = c.Compile(abs); err != nil {
		return nil, fmt.Errorf("compile SAM schema %s: %w", abs, err)
	}
	// The resource schemas are the alternatives of Resources' anyOf; each
	// pins its Type with a one-value enum.
	defs := asMap(asMap(doc)["definitions"])
	resources := asMap(asMap(asMap(doc)["properties"])["Resources"])
	for _, alt := range asList(asMap(resources["additionalProperties"])["anyOf"]) {
		ref, _ := asMap(alt)["$ref"].(string)
		name, ok := strings.CutPrefix(ref, "#/definitions/")
		if !ok {
			continue
		}
		typ := asMap(asMap(asMap(defs[name])["properties"])["Type"])
		enum := asList(typ["enum"])
		if len(enum) != 1 {
			continue
		}
		t, _ := enum[0].(string)
		sch, err := c.Compile(abs + ref)
		if err != nil {
			return nil, fmt.Errorf("compile SAM schema %s%s: %w", abs, ref, err)
		}
		s.byType[t] = sch
	}
	if len(s.byType) == 0 {
		return nil, fmt.Errorf("SAM schema %s: no resource types found under Resources", abs)
	}
	return s, nil
}

// Validate checks a template document (long-form intrinsics, as Parse
// returns it) against the schema. Problems in a resource are reported
// against that resource's own type.
func (s *Schema) Validate(doc map[string]any) error {
	inst, err := jsonValue(doc)
	if err != nil {
		return err
	}
	rootErr := s.root.Validate(inst)
	if rootErr == nil {
		return nil
	}
	resources := asMap(asMap(inst)["Resources"])
	ids := make([]string, 0, len(resources))
	for id := range resources {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	var errs []error
	for _, id := range ids {
		typ, _ := asMap(resources[id])["Type"].(string)
		if sch, ok := s.byType[typ]; ok {
			if err := sch.Validate(resources[id]); err != nil {
				var verr *jsonschema.ValidationError
				if errors.As(err, &verr) {
					prune(verr)
				}
				errs = append(errs, fmt.Errorf("resource %s (%s): %w", id, typ, err))
			}
		}
	}
	if len(errs) == 0 {
		var verr *jsonschema.ValidationError
		if errors.As(rootErr, &verr) {
			prune(verr)
		}
		return fmt.Errorf("template: %w", rootErr)
	}
	return errors.Join(errs...)
}

// prune drops, from every anyOf and oneOf failure, the alternatives whose
// Type did not match: an HttpApi event with a misspelt property should be
// explained by the HttpApi event schema alone, not by the other 18 event
// types it is not. When no alternative's Type matched, all are kept.
func prune(e *jsonschema.ValidationError) {
	for _, c := range e.Causes {
		prune(c)
	}
	switch e.ErrorKind.(type) {
	case *kind.AnyOf, *kind.OneOf:
	default:
		return
	}
	typeLoc := strings.Join(append(slices.Clone(e.InstanceLocation), "Type"), "/")
	var keep []*jsonschema.ValidationError
	for _, c := range e.Causes {
		if !typeMismatch(c, typeLoc, 4) {
			keep = append(keep, c)
		}
	}
	if len(keep) > 0 {
		e.Causes = keep
	}
}

// typeMismatch reports whether an alternative failed on the value at
// typeLoc not being one of its allowed values, looking through the few
// wrapper levels ($ref, allOf) the schema nests alternatives in.
func typeMismatch(e *jsonschema.ValidationError, typeLoc string, depth int) bool {
	switch e.ErrorKind.(type) {
	case *kind.Enum, *kind.Const:
		if strings.Join(e.InstanceLocation, "/") == typeLoc {
			return true
		}
	}
	if depth == 0 {
		return false
	}
	for _, c := range e.Causes {
		if typeMismatch(c, typeLoc, depth-1) {
			return true
		}
	}
	return false
}

// jsonValue gives the validator what it expects: JSON's own value types
// (json.Number for numbers), whatever YAML decoded the scalars to.
func jsonValue(doc map[string]any) (any, error) {
	raw, err := json.Marshal(doc)
	if err != nil {
		return nil, fmt.Errorf("template as JSON: %w", err)
	}
	return jsonschema.UnmarshalJSON(bytes.NewReader(raw))
}

type ecmaRE struct{ re *regexp2.Regexp }

func (r ecmaRE) MatchString(s string) bool {
	ok, err := r.re.MatchString(s)
	return err == nil && ok
}

func (r ecmaRE) String() string { return r.re.String() }

func ecmaRegexp(expr string) (jsonschema.Regexp, error) {
	re, err := regexp2.Compile(expr, regexp2.ECMAScript)
	if err != nil {
		return nil, err
	}
	return ecmaRE{re}, nil
}
