package settings_test

import (
	"reflect"
	"strings"
	"testing"

	"github.com/agentbus/agentbus/pkg/settings"
)

// TestFileProblemsNameTheKey: a value a setting's own type refuses (a
// duration, a size) is named by its key, at any depth.
func TestFileProblemsNameTheKey(t *testing.T) {
	t.Parallel()
	expectFileProblems(t, map[string]string{
		"registry:\n  waitTimeout: 5 seconds\n": `registry.waitTimeout: invalid duration "5 seconds"`,
		"shutdownTimeout: soon\n":               `shutdownTimeout: invalid duration "soon"`,
		"memory:\n  budget: lots\n":             `memory.budget: invalid size "lots"`,
		"webhooks:\n  timeout: 2 s\n":           `webhooks.timeout: invalid duration "2 s"`,
		"push:\n  mcp:\n    idleTimeout: -x\n":  `push.mcp.idleTimeout: invalid duration "-x"`,
		"authLimits:\n  logInterval: often\n":   `authLimits.logInterval: invalid duration "often"`,
		"streams:\n  duplicateWindow: 2 mins\n": `streams.duplicateWindow: invalid duration "2 mins"`,
		"webhooks:\n  retrySchedule: [1s, x]\n": `webhooks.retrySchedule[1]: invalid duration "x"`,
		"registry:\n  waitTimeout: 5s\n":        "",
	})
}

// TestFileProblemsGiveTheRealRange: a number setting given something else
// is told the range Validate takes, not its Go type's.
func TestFileProblemsGiveTheRealRange(t *testing.T) {
	t.Parallel()
	expectFileProblems(t, map[string]string{
		"limits:\n  pageMax: lots\n":     "limits.pageMax must be an integer, not a string; it must be at least 1",
		"processor:\n  workers: 1.5\n":   "processor.workers must be an integer, not the number 1.5; it must be 1 to 1024",
		"nats:\n  replicas: three\n":     "nats.replicas must be an integer, not a string; it must be 1 to 5",
		"limits:\n  bodyBytes: true\n":   "limits.bodyBytes must be an integer, not a boolean; it must be at least 1024",
		"quotas:\n  agents: [1]\n":       "quotas.agents must be an integer, not an array; it must be 1 to 100000",
		"http:\n  headerBytes: 32KiB\n":  "http.headerBytes must be an integer, not a string; it must be 4096 to 1048576",
		"limits:\n  pageDefault: many\n": "limits.pageDefault must be an integer, not a string; it must be 1 to limits.pageMax (1000)",
	})
	// Every number setting: never the range of its Go type.
	for _, key := range numberKeys(reflect.TypeFor[settings.Config](), "") {
		body := ""
		parts := strings.Split(key, ".")
		for i, p := range parts {
			body += strings.Repeat("  ", i) + p + ":"
			if i < len(parts)-1 {
				body += "\n"
			}
		}
		_, _, err := loadFile(t, body+" {}\n")
		if err == nil || !strings.Contains(err.Error(), key+" must be") || strings.Contains(err.Error(), "9223372036854775807") {
			t.Errorf("%s given an object: %v; want its range", key, err)
		}
	}
}

// numberKeys lists the keys of t's integer and float settings.
func numberKeys(t reflect.Type, path string) []string {
	var out []string
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" || name == "-" {
			continue
		}
		key := name
		if path != "" {
			key = path + "." + name
		}
		ft := f.Type
		if ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		if reflect.PointerTo(ft).Implements(reflect.TypeFor[interface{ UnmarshalJSON([]byte) error }]()) {
			continue
		}
		switch ft.Kind() {
		case reflect.Struct:
			out = append(out, numberKeys(ft, key)...)
		case reflect.Int, reflect.Int64, reflect.Float64:
			out = append(out, key)
		}
	}
	return out
}
