package abuse_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/agentbus/agentbus/test/testkit"
)

// TestControlHugeRegistrationArraysRefused: registration bodies with
// thousands of accepts or produces entries, or a megabyte of them, are
// refused (400 VALIDATION_FAILED at the array) in milliseconds, over
// REST and through POST /commands alike, and what is refused costs little
// CPU however large it is.
func TestControlHugeRegistrationArraysRefused(t *testing.T) {
	s := testkit.Agentbus(t, testkit.NoNATSPort)
	type tc struct {
		name, path, field string
		body              []byte
	}
	var cases []tc
	for _, n := range []int{1000, 3000, 5000, 10000} {
		for _, f := range []string{"accepts", "produces"} {
			b, _ := json.Marshal(map[string]any{"name": "huge", f: ctlTypes(n)})
			cases = append(cases, tc{fmt.Sprintf("agent %s %d", f, n), "/agents", f, b},
				tc{fmt.Sprintf("service %s %d", f, n), "/services", f, b})
		}
	}
	// About a megabyte of one short entry, again and again: as many
	// violations as entries if each were reported.
	mega := []byte(`{"name":"huge","accepts":[` + strings.Repeat(`"A",`, 250_000) + `"A"]}`)
	cases = append(cases, tc{"a megabyte of duplicates", "/agents", "accepts", mega})
	bad := []byte(`{"name":"huge","accepts":[` + strings.Repeat(`"a",`, 250_000) + `"a"]}`)
	cases = append(cases, tc{"a megabyte of invalid entries", "/agents", "accepts", bad})
	env, _ := json.Marshal(ctlCommand("RegisterAgent", "register-agent/1.0", map[string]any{"name": "huge", "accepts": ctlTypes(10000)}))
	cases = append(cases, tc{"RegisterAgent command", "/commands", "data.accepts", env})

	for _, c := range cases {
		cpu := ctlCPU()
		a := ctlCall(http.MethodPost, s.URL+c.path, "", c.body)
		used := ctlCPU() - cpu
		ctlMust(t, c.name, a, 400, "VALIDATION_FAILED")
		if !strings.Contains(string(a.Body), `"path":"$.`+c.field+`"`) {
			t.Errorf("%s: no violation at $.%s: %.300s", c.name, c.field, a.Body)
		}
		if len(a.Body) > 16<<10 {
			t.Errorf("%s: a %d-byte answer", c.name, len(a.Body))
		}
		// Generous bounds for a busy 2-core machine: a quadratic check,
		// or one violation per entry, costs seconds here.
		if a.Took > 2*time.Second || used > time.Second {
			t.Errorf("%s (%d bytes): refused after %s, %s of CPU", c.name, len(c.body), a.Took, used)
		}
		t.Logf("%s (%d bytes): refused after %s, %s of CPU", c.name, len(c.body), a.Took.Round(time.Microsecond), used)
	}
}
