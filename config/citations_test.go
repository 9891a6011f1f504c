package config_test

import "testing"

func TestCitationsValues(t *testing.T) {
	c := mustParse(t, "[research.citations]\nthreshold = 1\n", t.TempDir())
	if c.Research.Citations.Threshold != 1 {
		t.Fatalf("threshold = %v", c.Research.Citations.Threshold)
	}
	c = mustParse(t, "[research.llm]\nbase_url = \"http://127.0.0.1:9/v1\"\nmodels = [\"m\"]\n[research.citations]\nthreshold = 0.35\naction = \"revise\"\n", t.TempDir())
	if c.Research.Citations.Threshold != 0.35 || c.Research.Citations.Action != "revise" {
		t.Fatalf("citations = %+v", c.Research.Citations)
	}
}
