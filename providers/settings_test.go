package providers_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/sandstep/sandstep/providers"
)

type sample struct {
	BaseURL string             `json:"base_url"`
	Retries int                `json:"max_retries"`
	Timeout providers.Duration `json:"request_timeout"`
	Hosts   []string           `json:"hosts"`
	Nested  struct {
		On bool `json:"on"`
	} `json:"nested"`
	Untagged int
}

func TestDecodeSettingsOverDefaults(t *testing.T) {
	s := sample{Retries: 4, Timeout: providers.Duration(time.Minute)}
	err := providers.DecodeSettings([]byte(`{"base_url":"http://x","request_timeout":"5s","nested":{"on":true}}`), &s)
	if err != nil {
		t.Fatal(err)
	}
	if s.BaseURL != "http://x" || s.Retries != 4 || s.Timeout.D() != 5*time.Second || !s.Nested.On {
		t.Errorf("decoded %+v", s)
	}
	if err := providers.DecodeSettings(nil, &s); err != nil {
		t.Errorf("empty settings: %v", err)
	}
}

// Every problem at once, each by key; a bad value keeps the default.
func TestDecodeSettingsReportsEveryKey(t *testing.T) {
	s := sample{Retries: 4}
	err := providers.DecodeSettings([]byte(`{"base_ulr":"x","max_retries":"many","request_timeout":"soon","hosts":[1],"nested":{"of":true},"Untagged":1,"zzz":1}`), &s)
	var se *providers.SettingsError
	if !errors.As(err, &se) || providers.CodeOf(err) != providers.InvalidArgument {
		t.Fatalf("error %v, want a *SettingsError with code InvalidArgument", err)
	}
	want := []providers.SettingProblem{
		{Key: "Untagged", Message: "Untagged: unknown key (known keys: base_url, hosts, max_retries, nested, request_timeout)"},
		{Key: "base_ulr", Message: `base_ulr: unknown key (did you mean "base_url"?)`},
		{Key: "hosts", Message: "hosts: must be an array of strings"},
		{Key: "max_retries", Message: "max_retries: must be an integer, not a string"},
		{Key: "nested.of", Message: `nested.of: unknown key (did you mean "on"?)`},
		{Key: "request_timeout", Message: `request_timeout: invalid duration "soon" (want a number with a unit, e.g. "30s" or "5m")`},
		{Key: "zzz", Message: "zzz: unknown key (known keys: base_url, hosts, max_retries, nested, request_timeout)"},
	}
	if !slices.Equal(se.Problems, want) {
		t.Errorf("problems:\n%+v\nwant\n%+v", se.Problems, want)
	}
	if s.Retries != 4 {
		t.Errorf("a mistyped value replaced the default: %d", s.Retries)
	}
}
