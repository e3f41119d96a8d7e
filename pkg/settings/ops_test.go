package settings

import (
	"strings"
	"testing"
)

// TestOpsListen: the operations listener defaults to 127.0.0.1:8081, must
// be host:port, and is refused on the API's address (loopback names and
// the wildcard count as the same host); port 0 on both is two ports.
func TestOpsListen(t *testing.T) {
	if d := Default(); d.Ops.Listen != "127.0.0.1:8081" || d.Ops.Pprof {
		t.Fatalf("default ops: %+v", d.Ops)
	}
	for _, c := range []struct {
		api, ops string
		bad      bool
	}{
		{"127.0.0.1:8080", "127.0.0.1:8081", false},
		{"127.0.0.1:0", "127.0.0.1:0", false},
		{"127.0.0.1:8080", "127.0.0.1:8080", true},
		{"127.0.0.1:8080", "localhost:8080", true},
		{"0.0.0.0:8080", "127.0.0.1:8080", true},
		{"10.0.0.1:8080", "10.0.0.2:8080", false},
		{"127.0.0.1:8080", "8081", true},
	} {
		cfg := Default()
		cfg.Listen, cfg.Ops.Listen = c.api, c.ops
		cfg.Auth.AllowInsecureListen = true
		err := cfg.Validate()
		if got := err != nil; got != c.bad {
			t.Errorf("listen %s, ops.listen %s: error %v, want bad=%v", c.api, c.ops, err, c.bad)
			continue
		}
		if err != nil && !strings.Contains(err.Error(), "ops.listen") {
			t.Errorf("error %q does not name ops.listen", err)
		}
	}
}
