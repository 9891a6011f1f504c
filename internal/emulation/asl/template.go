package asl

import (
	"errors"
	"fmt"
	"strings"
)

// template is a compiled payload template (Parameters, ResultSelector,
// ItemSelector): fields whose names end in ".$" take their value from a path
// or an intrinsic function when the state runs.
type template struct {
	literal any // set when the template has no dynamic field at all
	dynamic bool
	object  []templateField
	array   []*template
	isArray bool
}

type templateField struct {
	name   string // without ".$"
	key    string // as written, for error messages
	path   *path
	call   *intrinsic
	nested *template
}

func compileTemplate(v any) (*template, error) {
	switch t := v.(type) {
	case map[string]any:
		out := &template{}
		seen := map[string]string{}
		var errs []error
		for _, k := range sortedKeys(t) {
			f := templateField{name: k, key: k}
			if name, ok := strings.CutSuffix(k, ".$"); ok {
				f.name = name
				src, isString := t[k].(string)
				switch {
				case !isString:
					errs = append(errs, fmt.Errorf("field %q must be a string holding a path or an intrinsic function", k))
					continue
				case isIntrinsic(src):
					c, err := parseIntrinsic(src)
					if err != nil {
						errs = append(errs, fmt.Errorf("field %q: %w", k, err))
						continue
					}
					f.call = c
				default:
					p, err := parsePath(src)
					if err != nil {
						errs = append(errs, fmt.Errorf("field %q: %w", k, err))
						continue
					}
					f.path = p
				}
				out.dynamic = true
			} else {
				nested, err := compileTemplate(t[k])
				if err != nil {
					errs = append(errs, fmt.Errorf("field %q: %w", k, err))
					continue
				}
				out.dynamic = out.dynamic || nested.dynamic
				f.nested = nested
			}
			if other, dup := seen[f.name]; dup {
				errs = append(errs, fmt.Errorf("fields %q and %q both produce %q", other, k, f.name))
				continue
			}
			seen[f.name] = k
			out.object = append(out.object, f)
		}
		if len(errs) > 0 {
			return nil, errors.Join(errs...)
		}
		if !out.dynamic {
			return &template{literal: t}, nil
		}
		return out, nil
	case []any:
		out := &template{isArray: true}
		for i, e := range t {
			nested, err := compileTemplate(e)
			if err != nil {
				return nil, fmt.Errorf("item %d: %w", i, err)
			}
			out.dynamic = out.dynamic || nested.dynamic
			out.array = append(out.array, nested)
		}
		if !out.dynamic {
			return &template{literal: t}, nil
		}
		return out, nil
	default:
		return &template{literal: v}, nil
	}
}

// eval builds the payload. Failures are States.Runtime, as the service
// reports a path that selects nothing or a failing intrinsic function.
func (t *template) eval(data, contextObject any) (any, *failure) {
	if !t.dynamic {
		return t.literal, nil
	}
	if t.isArray {
		out := make([]any, len(t.array))
		for i, e := range t.array {
			v, f := e.eval(data, contextObject)
			if f != nil {
				return nil, f
			}
			out[i] = v
		}
		return out, nil
	}
	out := make(map[string]any, len(t.object))
	for _, f := range t.object {
		switch {
		case f.path != nil:
			v, ok := f.path.get(data, contextObject)
			if !ok {
				src := data
				if f.path.context {
					src = contextObject
				}
				return nil, runtimeFailure("The JSONPath '%s' specified for the field '%s' could not be found in the input '%s'", f.path.src, f.key, mustJSON(src))
			}
			out[f.name] = v
		case f.call != nil:
			v, err := evalIntrinsic(f.call, data, contextObject)
			if err != nil {
				var pe *pathArgError
				if errors.As(err, &pe) {
					return nil, runtimeFailure("%s", err.Error())
				}
				return nil, runtimeFailure("The function '%s' for the field '%s' failed: %v", f.call.name, f.key, err)
			}
			out[f.name] = v
		default:
			v, fail := f.nested.eval(data, contextObject)
			if fail != nil {
				return nil, fail
			}
			out[f.name] = v
		}
	}
	return out, nil
}
