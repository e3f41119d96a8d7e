package readme_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/agentbus/agentbus/pkg/auth"
)

// TestCredentialExamples: a credential written out in the README or in
// docs/ (after "Bearer ", "X-API-Key:" or "api_key=") is a variable, a
// placeholder, or has the shape of agentbus's API keys, so a user copying
// it knows what to put there.
func TestCredentialExamples(t *testing.T) {
	files, err := filepath.Glob("../../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, readmePath)
	literal := regexp.MustCompile(`(?:Bearer |X-API-Key: ?|api_key=)([A-Za-z0-9_]+)`)
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(raw), "\n") {
			for _, m := range literal.FindAllStringSubmatch(line, -1) {
				if !strings.HasPrefix(m[1], auth.KeyPrefix) {
					t.Errorf("%s:%d: the credential %q does not start %q as API keys do: %s", filepath.Base(f), i+1, m[1], auth.KeyPrefix, strings.TrimSpace(line))
				}
			}
		}
	}
}
