package errs

import (
	"os"
	"regexp"
	"strconv"
	"testing"
)

// TestREADMEErrorCodes keeps the README's error-code table and the status
// table in step: every code listed with the status the table answers,
// and every code it knows listed.
func TestREADMEErrorCodes(t *testing.T) {
	raw, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	rows := regexp.MustCompile("(?m)^\\| `([A-Z_]+)` \\| ([0-9]{3}) \\|").FindAllStringSubmatch(string(raw), -1)
	listed := map[Code]bool{}
	for _, r := range rows {
		code, status := Code(r[1]), r[2]
		listed[code] = true
		if got, ok := statusOf[code]; !ok || strconv.Itoa(got) != status {
			t.Errorf("README lists %s as %s; the status table answers %d (known: %v)", code, status, got, ok)
		}
	}
	for code := range statusOf {
		if !listed[code] {
			t.Errorf("%s is not in the README's error-code table", code)
		}
	}
}

// TestStatusOfCoversEveryCode: the status table answers exactly agentbus's
// codes, so a code added to errs is not answered 500 by default.
func TestStatusOfCoversEveryCode(t *testing.T) {
	for _, c := range Codes() {
		if _, ok := statusOf[c]; !ok {
			t.Errorf("statusOf lacks %s", c)
		}
	}
	for c := range statusOf {
		if !c.Known() {
			t.Errorf("statusOf has %s, which errs does not declare", c)
		}
	}
}
