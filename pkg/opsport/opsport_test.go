package opsport_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/opsport"
)

func get(t *testing.T, h http.Handler, path string) (int, opsport.Report) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	var rep opsport.Report
	if path == "/readyz" {
		if err := json.Unmarshal(rec.Body.Bytes(), &rep); err != nil {
			t.Fatalf("GET %s: body %q is not a report: %v", path, rec.Body.String(), err)
		}
		if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
			t.Errorf("GET %s: Content-Type %q", path, ct)
		}
	}
	return rec.Code, rep
}

// TestReadyz: /readyz is 503 naming every check not ready, with its
// reason, until each is; a watched check is asked at every probe; /healthz
// is 200 throughout.
func TestReadyz(t *testing.T) {
	r := opsport.NewReadiness("catalog", "nats")
	h := opsport.New(opsport.Config{}, r).Handler()
	code, rep := get(t, h, "/readyz")
	if code != http.StatusServiceUnavailable || rep.Ready || len(rep.Checks) != 2 || rep.Checks[0].Reason != "pending" {
		t.Fatalf("fresh: %d %+v", code, rep)
	}
	if code, _ := get(t, h, "/healthz"); code != http.StatusOK {
		t.Fatalf("healthz while not ready: %d", code)
	}
	r.Set("catalog", nil)
	r.Set("nats", errors.New("connecting"))
	code, rep = get(t, h, "/readyz")
	if code != http.StatusServiceUnavailable || !rep.Checks[0].Ready || rep.Checks[1].Ready || rep.Checks[1].Reason != "connecting" {
		t.Fatalf("catalog ready, nats connecting: %d %+v", code, rep)
	}
	up := false
	r.Watch("nats", func() error {
		if !up {
			return errors.New("disconnected")
		}
		return nil
	})
	if code, rep = get(t, h, "/readyz"); code != http.StatusServiceUnavailable || rep.Checks[1].Reason != "disconnected" {
		t.Fatalf("watched, down: %d %+v", code, rep)
	}
	up = true
	if code, rep = get(t, h, "/readyz"); code != http.StatusOK || !rep.Ready {
		t.Fatalf("all ready: %d %+v", code, rep)
	}
	r.Set("shutdown", errors.New("stopping"))
	if code, rep = get(t, h, "/readyz"); code != http.StatusServiceUnavailable || len(rep.Checks) != 3 || rep.Checks[2].Name != "shutdown" {
		t.Fatalf("a check added later: %d %+v", code, rep)
	}
}

// TestPprofOnlyWhenAsked: /debug/pprof/ is served with Config.Pprof only;
// routes added with Handle sit beside the probes.
func TestPprofOnlyWhenAsked(t *testing.T) {
	r := opsport.NewReadiness()
	for _, on := range []bool{false, true} {
		p := opsport.New(opsport.Config{Pprof: on}, r)
		p.Handle("GET /metrics", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusTeapot) }))
		rec := httptest.NewRecorder()
		p.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/debug/pprof/", nil))
		if want := map[bool]int{false: http.StatusNotFound, true: http.StatusOK}[on]; rec.Code != want {
			t.Errorf("pprof %v: /debug/pprof/ answered %d, want %d", on, rec.Code, want)
		}
		rec = httptest.NewRecorder()
		p.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
		if rec.Code != http.StatusTeapot {
			t.Errorf("a handled route answered %d", rec.Code)
		}
	}
}

// TestListenTaken: a taken address is an error naming it and the setting.
func TestListenTaken(t *testing.T) {
	a := opsport.New(opsport.Config{}, opsport.NewReadiness())
	if err := a.Listen("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	defer a.Shutdown(t.Context())
	b := opsport.New(opsport.Config{}, opsport.NewReadiness())
	err := b.Listen(a.Addr())
	if err == nil {
		b.Shutdown(t.Context())
		t.Fatal("listened on a taken address")
	}
	for _, want := range []string{a.Addr(), "ops.listen", "--ops-listen", "AGENTBUS_OPS_LISTEN"} {
		if !contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }

// TestPoll: a polled check records each answer of its source, as Set
// would, until its context ends; an answer wrapping ErrUnknown leaves the
// check as it was.
func TestPoll(t *testing.T) {
	r := opsport.NewReadiness("streams")
	h := opsport.New(opsport.Config{}, r).Handler()
	ctx, cancel := context.WithCancel(context.Background())
	calls, answers, done := make(chan struct{}), make(chan error), make(chan struct{})
	go func() {
		defer close(done)
		// The source answers when the test says, however long that takes
		// (each ask's own deadline, the period, is not this test's
		// subject): only the end of the test's context ends it.
		r.Poll(ctx, "streams", time.Millisecond, func(context.Context) error {
			select {
			case calls <- struct{}{}:
			case <-ctx.Done():
				return ctx.Err()
			}
			select {
			case err := <-answers:
				return err
			case <-ctx.Done():
				return ctx.Err()
			}
		})
	}()
	<-calls
	// answer gives the source's answer, and returns once Poll has
	// recorded it (it asks again only after).
	answer := func(err error) (int, opsport.Report) {
		answers <- err
		<-calls
		return get(t, h, "/readyz")
	}
	if code, rep := answer(nil); code != http.StatusOK || !rep.Ready {
		t.Fatalf("answered ready: %d %+v", code, rep)
	}
	if code, rep := answer(fmt.Errorf("%w: no answer", opsport.ErrUnknown)); code != http.StatusOK || !rep.Ready {
		t.Fatalf("answered unknown after ready: %d %+v", code, rep)
	}
	if code, rep := answer(errors.New("missing: stream S")); code != http.StatusServiceUnavailable || rep.Checks[0].Reason != "missing: stream S" {
		t.Fatalf("answered missing: %d %+v", code, rep)
	}
	if code, rep := answer(fmt.Errorf("%w: no answer", opsport.ErrUnknown)); code != http.StatusServiceUnavailable || rep.Checks[0].Reason != "missing: stream S" {
		t.Fatalf("answered unknown after missing: %d %+v", code, rep)
	}
	if code, rep := answer(nil); code != http.StatusOK || !rep.Ready {
		t.Fatalf("answered ready again: %d %+v", code, rep)
	}
	cancel()
	<-done
}
