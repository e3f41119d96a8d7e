package ops_test

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/catalog"
	"github.com/agentbus/agentbus/pkg/errs"
	"github.com/agentbus/agentbus/pkg/ops"
)

// surface returns the operations table of cfg, on the built-in catalogue
// and no ports, by id.
func surface(t *testing.T, cfg ops.Config) map[string]ops.Operation {
	t.Helper()
	cat, err := catalog.Load(catalog.Builtin())
	if err != nil {
		t.Fatal(err)
	}
	byID := map[string]ops.Operation{}
	for _, op := range ops.New(cfg, cat, ops.Ports{}).Operations() {
		byID[op.ID] = op
	}
	return byID
}

// keyOf is a caller with the tenants and scopes given.
func keyOf(id string, tenants []string, scopes ...ops.Scope) ops.Caller {
	return ops.Caller{ID: id, Allow: func(tenant string, scope ops.Scope) error {
		if !slices.Contains(tenants, tenant) {
			return errs.New(errs.CodeForbidden, "tenant")
		}
		if scope != "" && !slices.Contains(scopes, scope) {
			return errs.New(errs.CodeForbidden, "scope")
		}
		return nil
	}}
}

// TestAdmitChecksInOrder: the door checks the tenant, then whether the
// operation is switched on, then the scope, the same for every caller.
func TestAdmitChecksInOrder(t *testing.T) {
	t.Parallel()
	table := surface(t, ops.Config{}) // injectEvent is switched off
	reader := keyOf("r", []string{"acme"}, ops.ScopeRead)
	admin := keyOf("a", []string{"acme"}, ops.ScopeRead, ops.ScopeWrite, ops.ScopeAdmin)
	for _, tc := range []struct {
		name    string
		caller  ops.Caller
		tenant  string
		op      string
		code    errs.Code
		message string
	}{
		{"another tenant, switched off", admin, "globex", "injectEvent", errs.CodeForbidden, "tenant"},
		{"switched off, whatever the scope", reader, "acme", "injectEvent", errs.CodeCapabilityNotSupported, ""},
		{"switched off, for an admin", admin, "acme", "injectEvent", errs.CodeCapabilityNotSupported, ""},
		{"switched off, without authentication", ops.Caller{}, "acme", "injectEvent", errs.CodeCapabilityNotSupported, ""},
		{"scope", reader, "acme", "submitCommand", errs.CodeForbidden, "scope"},
		{"another tenant", reader, "globex", "listCommandCatalog", errs.CodeForbidden, "tenant"},
		{"let in", reader, "acme", "listCommandCatalog", "", ""},
		{"without authentication", ops.Caller{}, "globex", "submitCommand", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			call, err := ops.Admit(tc.caller, tc.tenant, table[tc.op])
			if errs.CodeOf(err) != tc.code || (tc.message != "" && errs.As(err).Message != tc.message) {
				t.Fatalf("Admit: %v, want %s %s", err, tc.code, tc.message)
			}
			if tc.code == "" && (call.Tenant() != tc.tenant || call.Op().ID != tc.op || call.Caller().ID != tc.caller.ID) {
				t.Errorf("call %s %s %s", call.Tenant(), call.Op().ID, call.Caller().ID)
			}
		})
	}
}

// TestInvokeRunsThroughTheMiddleware: every call runs through the
// configured middleware, outermost first, with its request's tenant and
// caller set from the call, whatever the transport put there.
func TestInvokeRunsThroughTheMiddleware(t *testing.T) {
	t.Parallel()
	var seen []string
	mw := func(name string) ops.Middleware {
		return func(next ops.Handler) ops.Handler {
			return func(ctx context.Context, c *ops.Call, r *ops.Request, emit ops.Emit) (*ops.Response, error) {
				seen = append(seen, name+":"+c.Op().ID+":"+r.Tenant+":"+r.Caller)
				return next(ctx, c, r, emit)
			}
		}
	}
	table := surface(t, ops.Config{Middleware: []ops.Middleware{mw("outer"), mw("inner")}})
	call, err := ops.Admit(keyOf("k", []string{"acme"}, ops.ScopeRead), "acme", table["listCommandCatalog"])
	if err != nil {
		t.Fatal(err)
	}
	res, err := call.Invoke(context.Background(), &ops.Request{Tenant: "globex", Caller: "someone"})
	if err != nil || res.Body == nil {
		t.Fatalf("Invoke: %v %v", res, err)
	}
	want := []string{"outer:listCommandCatalog:acme:k", "inner:listCommandCatalog:acme:k"}
	if !slices.Equal(seen, want) {
		t.Errorf("middleware saw %v, want %v", seen, want)
	}
}

// TestSlotBoundsACallersStreams: a call takes one of its caller's live
// streams, refused RATE_LIMITED past StreamConfig.PerCaller until one is
// given back.
func TestSlotBoundsACallersStreams(t *testing.T) {
	t.Parallel()
	table := surface(t, ops.Config{Streams: ops.StreamConfig{PerCaller: 1}})
	call, err := ops.Admit(keyOf("k", []string{"acme"}, ops.ScopeRead), "acme", table["getTrace"])
	if err != nil {
		t.Fatal(err)
	}
	leave, err := call.Slot()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := call.Slot(); errs.CodeOf(err) != errs.CodeRateLimited {
		t.Fatalf("a second stream: %v, want RATE_LIMITED", err)
	}
	other, _ := ops.Admit(keyOf("other", []string{"acme"}, ops.ScopeRead), "acme", table["getTrace"])
	if l, err := other.Slot(); err != nil {
		t.Fatalf("another caller's stream: %v", err)
	} else {
		l()
	}
	leave()
	leave() // idempotent
	if l, err := call.Slot(); err != nil {
		t.Fatalf("after leaving: %v", err)
	} else {
		l()
	}
}

// TestSlotWithLiveCounts: with Config.Live set (what metrics count), a
// slot's leave gives the slot back and closes the count once, however
// often it is called.
func TestSlotWithLiveCounts(t *testing.T) {
	t.Parallel()
	var open atomic.Int64
	live := func(string) func() {
		open.Add(1)
		return func() { open.Add(-1) }
	}
	table := surface(t, ops.Config{Streams: ops.StreamConfig{PerCaller: 1}, Live: live})
	call, err := ops.Admit(keyOf("k", []string{"acme"}, ops.ScopeRead).Via("a2a"), "acme", table["getTrace"])
	if err != nil {
		t.Fatal(err)
	}
	leave, err := call.Slot()
	if err != nil {
		t.Fatal(err)
	}
	if n := open.Load(); n != 1 {
		t.Fatalf("%d streams counted open, want 1", n)
	}
	left := make(chan struct{})
	go func() { leave(); leave(); close(left) }()
	select {
	case <-left:
	case <-time.After(10 * time.Second):
		t.Fatal("leave never returned")
	}
	if n := open.Load(); n != 0 {
		t.Fatalf("%d streams counted open after leaving, want 0", n)
	}
	if l, err := call.Slot(); err != nil {
		t.Fatalf("after leaving: %v", err)
	} else {
		l()
	}
}

// TestRefusedStreamIsNotCounted: a live stream refused before it takes
// its slot (here for an invalid parameter) is never counted open
// (Config.Live), and leaves its slot free.
func TestRefusedStreamIsNotCounted(t *testing.T) {
	t.Parallel()
	var opened atomic.Int64
	live := func(string) func() {
		opened.Add(1)
		return func() {}
	}
	table := surface(t, ops.Config{Streams: ops.StreamConfig{PerCaller: 1}, Live: live})
	call, err := ops.Admit(keyOf("k", []string{"acme"}, ops.ScopeRead).Via("rest"), "acme", table["listEvents"])
	if err != nil {
		t.Fatal(err)
	}
	err = call.Stream(context.Background(), &ops.Request{Params: map[string][]string{"view": {"bogus"}}}, nil)
	if errs.CodeOf(err) != errs.CodeValidationFailed {
		t.Fatalf("a stream of view=bogus: %v, want VALIDATION_FAILED", err)
	}
	if n := opened.Load(); n != 0 {
		t.Errorf("refused streams were counted open %d times", n)
	}
	if leave, err := call.Slot(); err != nil {
		t.Errorf("the caller's one slot after refused streams: %v", err)
	} else {
		leave()
	}
}
