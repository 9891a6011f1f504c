package ddblocal

import (
	"fmt"
	"os"
	"path/filepath"
)

// TemplateEnv names the environment variable that points at template.yaml
// when it is not found walking up from the working directory.
const TemplateEnv = "SANDSTEP_TEMPLATE"

// FindTemplate returns $SANDSTEP_TEMPLATE, or the first template.yaml found
// walking up from the working directory (tests run in their package folder).
func FindTemplate() (string, error) {
	if p := os.Getenv(TemplateEnv); p != "" {
		return p, nil
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for dir := wd; ; dir = filepath.Dir(dir) {
		p := filepath.Join(dir, "template.yaml")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
		if filepath.Dir(dir) == dir {
			return "", fmt.Errorf("template.yaml not found in %s or above (set %s)", wd, TemplateEnv)
		}
	}
}
