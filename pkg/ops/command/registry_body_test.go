package command

import (
	"encoding/json"
	"log/slog"
	"slices"
	"testing"

	"github.com/agentbus/agentbus/pkg/catalog"
	"github.com/agentbus/agentbus/pkg/decide"
	"github.com/agentbus/agentbus/pkg/errs"
	"github.com/agentbus/agentbus/pkg/execute"
)

func TestRegistrationBody(t *testing.T) {
	cat, err := catalog.Load(catalog.Builtin())
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	proc := execute.New(execute.Config{}, cat, execute.Ports{}, log)
	proc.HandleControlPlane()
	a := NewRegistry(cat, 0, RegistryPorts{ControlPlane: proc.ControlPlane()})
	vs := cat.CommandVersions(decide.TypeRegisterAgent)
	entry := vs[len(vs)-1]
	tests := []struct {
		name  string
		body  string
		code  errs.Code
		paths []string
	}{
		{"valid with id", `{"id":"a1","name":"A","accepts":[],"produces":[]}`, "", nil},
		{"valid without id", `{"name":"A","accepts":[],"produces":[]}`, "", nil},
		{"malformed", `{"name":`, errs.CodeMalformedJSON, nil},
		{"not an object", `["name"]`, errs.CodeValidationFailed, []string{"$"}},
		{"duplicate key", `{"name":"A","name":"B","accepts":[],"produces":[]}`, errs.CodeValidationFailed, []string{"$.name"}},
		{"unknown key", `{"name":"A","accepts":[],"produces":[],"colour":"red"}`, errs.CodeValidationFailed, []string{"$.colour"}},
		{"accepts types agents take", `{"name":"A","accepts":["ShipOrder","ChargeCustomer"],"produces":[]}`, "", nil},
		{"accepts a control command", `{"name":"A","accepts":["ShipOrder","RegisterAgent","PauseAgent"],"produces":[]}`,
			errs.CodeValidationFailed, []string{"$.accepts.1", "$.accepts.2"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data, id, err := a.registrationBody(entry, []byte(tt.body))
			if tt.code == "" {
				if err != nil {
					t.Fatalf("registrationBody: %v", err)
				}
				var got map[string]any
				if err := json.Unmarshal(data, &got); err != nil || got["id"] != id || id == "" || got["name"] != "A" {
					t.Fatalf("data %s, id %q", data, id)
				}
				return
			}
			e := errs.As(err)
			if err == nil || e.Code != tt.code {
				t.Fatalf("err = %v, want %s", err, tt.code)
			}
			var paths []string
			for _, v := range e.Violations {
				paths = append(paths, v.Path)
			}
			if tt.paths != nil && !slices.Equal(paths, tt.paths) {
				t.Errorf("violation paths %v, want %v", paths, tt.paths)
			}
		})
	}
}
