package rest_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/agentbus/agentbus/pkg/catalog"
	"github.com/agentbus/agentbus/pkg/envelope"
	"github.com/agentbus/agentbus/pkg/errs"
	"github.com/agentbus/agentbus/pkg/ops"
	"github.com/agentbus/agentbus/pkg/transport/rest"
)

// TestOperationsRunThroughTheDoor: REST runs every operation through the
// door: the surface's middleware sees each call the guard let in, with
// its caller and tenant, and none it refused; without authentication the
// door still refuses a switched-off operation, once the request is read.
func TestOperationsRunThroughTheDoor(t *testing.T) {
	t.Parallel()
	cat, err := catalog.Load(catalog.Builtin())
	if err != nil {
		t.Fatal(err)
	}
	var seen []string
	record := func(next ops.Handler) ops.Handler {
		return func(ctx context.Context, c *ops.Call, r *ops.Request, emit ops.Emit) (*ops.Response, error) {
			seen = append(seen, c.Op().ID+" "+c.Tenant()+" "+c.Caller().ID)
			return next(ctx, c, r, emit)
		}
	}
	surface := ops.New(ops.Config{Middleware: []ops.Middleware{record}}, cat, ops.Ports{})
	eps, err := rest.Bind(surface.Operations())
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))

	e := rest.New(rest.Config{}, eps, log)
	e.Use(rest.Authorize(rest.Config{}, eps, fakeGuard{}))
	if r := guardedGet(e, "/commands", envelope.DefaultTenant); r.status != http.StatusOK {
		t.Fatalf("GET /commands: %d %s", r.status, r.body)
	}
	errorBody(t, guardedGet(e, "/commands", "another"), 403, errs.CodeForbidden)
	post := httptest.NewRequest(http.MethodPost, "/commands", strings.NewReader(`{}`))
	post.Header.Set("Content-Type", "application/json")
	post.Header.Set("X-Test", envelope.DefaultTenant) // a key with the read scope alone
	w := httptest.NewRecorder()
	e.ServeHTTP(w, post)
	errorBody(t, &result{status: w.Code, header: w.Header(), body: w.Body.Bytes()}, 403, errs.CodeForbidden)
	want := []string{"listCommandCatalog " + envelope.DefaultTenant + " k"}
	if !slices.Equal(seen, want) {
		t.Errorf("the middleware saw %q, want %q", seen, want)
	}

	seen = nil
	open := rest.New(rest.Config{}, eps, log) // no authentication
	if r := guardedGet(open, "/commands", ""); r.status != http.StatusOK {
		t.Fatalf("GET /commands without authentication: %d %s", r.status, r.body)
	}
	f := &fixture{h: open}
	errorBody(t, f.post("/events", "application/json", `{}`), 422, errs.CodeCapabilityNotSupported)
	// Without authentication the request is read first, as before the
	// door: a body REST cannot take is refused as such.
	errorBody(t, f.post("/events", "text/plain", `x`), 415, errs.CodeUnsupportedMediaType)
	if want := []string{"listCommandCatalog " + envelope.DefaultTenant + " "}; !slices.Equal(seen, want) {
		t.Errorf("without authentication the middleware saw %q, want %q", seen, want)
	}
}
