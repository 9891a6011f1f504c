// Package cfn reads CloudFormation and SAM templates written in YAML into
// plain Go values, with every short-form intrinsic (!Ref, !GetAtt, !Sub...)
// in its long form. The template checks and the table creation of the local
// stack both read template.yaml through it.
package cfn

import (
	"bytes"
	"errors"
	"fmt"
	"strings"

	"gopkg.in/yaml.v3"
)

// Parse decodes a CloudFormation/SAM template written in YAML (or JSON,
// which is YAML) and rewrites the short-form tags (!Ref, !GetAtt, !Sub...)
// to their long forms. Unknown tags and duplicate keys are errors: AWS
// refuses both, so accepting them here would hide the mistake.
func Parse(data []byte) (map[string]any, error) {
	var n yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&n); err != nil {
		return nil, fmt.Errorf("parse: %w", err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		return nil, fmt.Errorf("line %d: a template is one YAML document", extra.Line)
	}
	v, err := convert(&n)
	if err != nil {
		return nil, err
	}
	doc, ok := v.(map[string]any)
	if !ok {
		return nil, errors.New("top level is not a mapping")
	}
	return doc, nil
}

// shortForms maps each short-form tag to its long-form key.
var shortForms = map[string]string{
	"!Ref":         "Ref",
	"!Condition":   "Condition",
	"!GetAtt":      "Fn::GetAtt",
	"!Sub":         "Fn::Sub",
	"!Join":        "Fn::Join",
	"!If":          "Fn::If",
	"!Select":      "Fn::Select",
	"!Split":       "Fn::Split",
	"!FindInMap":   "Fn::FindInMap",
	"!GetAZs":      "Fn::GetAZs",
	"!ImportValue": "Fn::ImportValue",
	"!Equals":      "Fn::Equals",
	"!And":         "Fn::And",
	"!Or":          "Fn::Or",
	"!Not":         "Fn::Not",
	"!Base64":      "Fn::Base64",
	"!Cidr":        "Fn::Cidr",
	"!Transform":   "Fn::Transform",
}

func convert(n *yaml.Node) (any, error) {
	switch n.Kind {
	case yaml.DocumentNode:
		if len(n.Content) == 0 {
			return nil, errors.New("empty document")
		}
		return convert(n.Content[0])
	case yaml.AliasNode:
		return convert(n.Alias)
	}
	if strings.HasPrefix(n.Tag, "!") && !strings.HasPrefix(n.Tag, "!!") {
		key, ok := shortForms[n.Tag]
		if !ok {
			return nil, fmt.Errorf("line %d: unknown tag %s", n.Line, n.Tag)
		}
		plain := *n
		plain.Tag = ""
		// A tagged scalar is always a string argument (!Ref 0 names "0").
		if plain.Kind == yaml.ScalarNode {
			plain.Tag = "!!str"
		}
		v, err := convert(&plain)
		if err != nil {
			return nil, err
		}
		if key == "Fn::GetAtt" {
			if v, err = getAttArgs(v, n.Line); err != nil {
				return nil, err
			}
		}
		return map[string]any{key: v}, nil
	}
	switch n.Kind {
	case yaml.MappingNode:
		m := make(map[string]any, len(n.Content)/2)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i]
			if k.Kind == yaml.AliasNode {
				k = k.Alias
			}
			if k.Kind != yaml.ScalarNode {
				return nil, fmt.Errorf("line %d: mapping key is not a scalar", k.Line)
			}
			if _, dup := m[k.Value]; dup {
				return nil, fmt.Errorf("line %d: duplicate key %q", k.Line, k.Value)
			}
			v, err := convert(n.Content[i+1])
			if err != nil {
				return nil, err
			}
			m[k.Value] = v
		}
		return m, nil
	case yaml.SequenceNode:
		l := make([]any, 0, len(n.Content))
		for _, c := range n.Content {
			v, err := convert(c)
			if err != nil {
				return nil, err
			}
			l = append(l, v)
		}
		return l, nil
	default:
		// CloudFormation has no timestamps: an unquoted date is the string
		// it looks like (AWSTemplateFormatVersion: 2010-09-09).
		if n.Tag == "!!timestamp" {
			return n.Value, nil
		}
		var v any
		if err := n.Decode(&v); err != nil {
			return nil, fmt.Errorf("line %d: %w", n.Line, err)
		}
		return v, nil
	}
}

// getAttArgs turns !GetAtt's string form "Resource.Attribute" into the list
// form. Only the first dot separates: attributes may contain dots
// (Endpoint.Address).
func getAttArgs(v any, line int) (any, error) {
	s, ok := v.(string)
	if !ok {
		return v, nil
	}
	res, attr, ok := strings.Cut(s, ".")
	if !ok || res == "" || attr == "" {
		return nil, fmt.Errorf("line %d: !GetAtt %q: want Resource.Attribute", line, s)
	}
	return []any{res, attr}, nil
}
