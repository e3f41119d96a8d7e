package settings

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestOpsListen: the operations listener defaults to 127.0.0.1:8081 with
// metrics on and the profiler off; its address must be host:port, and is
// refused on the API's address (loopback names and the wildcard count as
// the same host); port 0 on both is two ports.
func TestOpsListen(t *testing.T) {
	if d := Default(); d.Ops.Listen != "127.0.0.1:8081" || d.Ops.Pprof || !d.Ops.Metrics {
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

// TestOpsMetrics: ops.metrics stays on when a file sets other ops keys,
// and a file turns it off.
func TestOpsMetrics(t *testing.T) {
	for _, c := range []struct {
		file string
		want bool
	}{
		{"ops:\n  listen: 127.0.0.1:9181\n", true},
		{"ops:\n  metrics: false\n", false},
		{"ops:\n  metrics: true\n", true},
	} {
		path := filepath.Join(t.TempDir(), "agentbus.yaml")
		if err := os.WriteFile(path, []byte(c.file), 0o600); err != nil {
			t.Fatal(err)
		}
		cfg := Default()
		if err := cfg.LoadFile(path); err != nil {
			t.Fatalf("%q: %v", c.file, err)
		}
		if cfg.Ops.Metrics != c.want {
			t.Errorf("%q: ops.metrics %v, want %v", c.file, cfg.Ops.Metrics, c.want)
		}
	}
}
