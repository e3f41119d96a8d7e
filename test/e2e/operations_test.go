package e2e_test

import (
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/agentbus/agentbus/pkg/errs"
	"github.com/agentbus/agentbus/pkg/ops"
	"github.com/agentbus/agentbus/pkg/settings"
	"github.com/agentbus/agentbus/pkg/transport/rest"
)

// TestEveryOperationIsReachableOverREST walks the operations table as the
// server binds it and calls each operation through its REST route: every
// one answers with one of its outcomes or one of its error codes, never
// with a routing error; one that takes no input succeeds; and an operation
// selected by a query parameter on another's route (listEventCatalog)
// answers differently from that one.
func TestEveryOperationIsReachableOverREST(t *testing.T) {
	t.Parallel()
	s := start(t, func(c *settings.Config) { c.Events.AllowInjection = true })
	table := s.Ops.Operations()
	if len(s.Endpoints) != len(table) {
		t.Fatalf("%d endpoints for %d operations", len(s.Endpoints), len(table))
	}
	sample := map[string]string{"schema": "place-order", "version": "1.0", "id": "no-such-id"}
	bodies := map[string][]byte{}
	for _, ep := range s.Endpoints {
		t.Run(ep.ID, func(t *testing.T) {
			path := ep.Path
			for _, name := range ep.PathParams() {
				path = strings.ReplaceAll(path, "{"+name+"}", sample[name])
			}
			q := url.Values{}
			if ep.Select[0] != "" {
				q.Set(ep.Select[0], ep.Select[1])
			}
			target := s.URL + path
			if len(q) > 0 {
				target += "?" + q.Encode()
			}
			var body []byte
			ct := ""
			if ep.Body != nil {
				body, ct = []byte(`{}`), "application/json"
			}
			r := do(t, ep.Method, target, ct, body)
			bodies[ep.ID] = r.Body
			var statuses []int
			for _, o := range ep.Outcomes {
				statuses = append(statuses, rest.Status(o))
			}
			if slices.Contains(statuses, r.Status) {
				return
			}
			if ep.Body == nil && len(ep.PathParams()) == 0 {
				t.Fatalf("%s %s takes no input and failed: %d %s", ep.Method, target, r.Status, r.Body)
			}
			code := errs.Code(r.errorCode(t))
			if code == errs.CodeRouteNotFound || code == errs.CodeMethodNotAllowed ||
				!slices.Contains(ep.Errors, code) && !slices.Contains(ops.CommonErrors, code) {
				t.Fatalf("%s %s: %d %s, neither an outcome %v nor one of its error codes", ep.Method, target, r.Status, r.Body, statuses)
			}
			if r.Status != errs.StatusOf(code) {
				t.Fatalf("%s: status %d for %s", ep.ID, r.Status, code)
			}
		})
	}
	if string(bodies["listEvents"]) == string(bodies["listEventCatalog"]) {
		t.Fatalf("listEventCatalog answered as listEvents: %s", bodies["listEventCatalog"])
	}
	if r := get(t, s.URL+"/events?view=catalog"); r.Status != http.StatusOK || !strings.Contains(string(r.Body), `"schema"`) {
		t.Fatalf("GET /events?view=catalog: %d %s", r.Status, r.Body)
	}
}
