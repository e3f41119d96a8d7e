package main

import (
	"reflect"
	"testing"

	"sigs.k8s.io/yaml"
)

// TestSoakSettings: -soak-settings with -soak-pprof keeps the settings'
// own ops beside ops.pprof (one ops key, not two), and bad YAML is an
// error naming the flag.
func TestSoakSettings(t *testing.T) {
	out, err := soakSettings("processor: {handoff: false}\nops: {metrics: false}", true)
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := yaml.Unmarshal(out, &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"processor": map[string]any{"handoff": false},
		"ops":       map[string]any{"metrics": false, "pprof": true},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("settings %s, want %v", out, want)
	}
	if _, err := soakSettings("processor: [", false); err == nil {
		t.Error("bad YAML taken")
	}
}
