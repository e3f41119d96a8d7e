package e2e_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/auth"
	"github.com/agentbus/agentbus/pkg/bearer"
	"github.com/agentbus/agentbus/pkg/server"
	"github.com/agentbus/agentbus/pkg/settings"
	"github.com/agentbus/agentbus/test/testkit"
)

// A live stream checks its credential again every push.recheck however
// busy it is, and a token's stream ends at the token's expiry: these
// tests keep events flowing (a command a second) faster than the
// heartbeat, so that a check made only on a silent stream would never
// come.

// busy is the stream bounds of these tests, a heartbeat longer than the
// gap between two events, with the example catalogue (whose PlaceOrder
// agentbus processes into OrderPlaced).
func busy(c *settings.Config) {
	c.Push.Heartbeat = settings.Duration(3 * time.Second)
	c.Catalog.Dirs = []string{"../../config/catalog"}
}

// flowCommands submits a PlaceOrder with the bootstrap key every second
// until the test ends; each is processed into an event.
func flowCommands(t *testing.T, s *server.Server) {
	t.Helper()
	testkit.Every(t, time.Second, func(n int) {
		body, _ := json.Marshal(placeOrder(fmt.Sprintf("flow-%d-%d", time.Now().UnixNano(), n)))
		_, _, _, _ = testkit.Send(http.DefaultClient, http.MethodPost, s.URL+"/commands", "application/json", body,
			"Authorization", "Bearer "+auBootstrap)
	})
}

// endsWithin fails t unless st ends within d, saying UNAUTHENTICATED. It
// returns when it ended.
func endsWithin(t *testing.T, st *sseStream, d time.Duration) time.Time {
	t.Helper()
	select {
	case <-st.done:
	case <-time.After(d):
		t.Fatalf("the stream goes on %s later while events flow (%d events sent)", d, len(st.events))
	}
	ended := time.Now()
	saw := false
	for len(st.comments) > 0 {
		if c := <-st.comments; strings.HasPrefix(c, "closed: UNAUTHENTICATED") {
			saw = true
		}
	}
	if !saw {
		t.Fatal("the stream ended without saying why")
	}
	return ended
}

// TestStreamOfARevokedKeyEndsWhileEventsFlow: with an event every second
// and a heartbeat every 3 s, a stream ends within push.recheck (1 s) and
// the second a revocation takes to reach the replica, with a margin for a
// loaded machine; the stream of a key that holds goes on.
func TestStreamOfARevokedKeyEndsWhileEventsFlow(t *testing.T) {
	t.Parallel()
	s := auStart(t, "bearer", busy, func(c *settings.Config) { c.Push.Recheck = settings.Duration(time.Second) })
	keys := auKeys(t, s)
	doomed, doomedID := auMint(t, keys, "default", auth.ScopeRead)
	kept, _ := auMint(t, keys, "default", auth.ScopeRead)
	flowCommands(t, s)
	stDoomed := openStream(t, s.URL+"/events", "Authorization", "Bearer "+doomed)
	stKept := openStream(t, s.URL+"/events", "Authorization", "Bearer "+kept)
	stDoomed.next(t, 2) // the events flow
	if _, err := keys.Revoke(context.Background(), doomedID); err != nil {
		t.Fatal(err)
	}
	endsWithin(t, stDoomed, 6*time.Second)
	for range len(stKept.events) {
		<-stKept.events
	}
	stKept.next(t, 2) // still flowing
}

// TestStreamOfAnExpiredTokenEndsAtItsExpiry: a bearer token's stream ends
// at the token's exp, not at the next check (push.recheck is left at
// 15 s here), while events flow every second.
func TestStreamOfAnExpiredTokenEndsAtItsExpiry(t *testing.T) {
	t.Parallel()
	s := auStart(t, "bearer", busy)
	keys := auKeys(t, s)
	key, keyID := auMint(t, keys, "default", auth.ScopeRead)
	// A token as the token endpoint signs it, living 4 s.
	iss := issuerOf(t, auToken(t, s.URL, keyID, key, "read"))
	token, exp, err := bearer.New([]byte(auSigningKey), iss, 4*time.Second, time.Now, nil).Issue(keyID, []string{"default"}, "read", "")
	if err != nil {
		t.Fatal(err)
	}
	flowCommands(t, s)
	st := openStream(t, s.URL+"/events", "Authorization", "Bearer "+token)
	ended := endsWithin(t, st, time.Until(exp)+2*time.Second)
	if len(st.events) == 0 {
		t.Fatal("no event flowed on the stream")
	}
	if ended.Before(exp) {
		t.Fatalf("the stream ended at %s, before its token's expiry %s", ended.Format(time.RFC3339Nano), exp.Format(time.RFC3339Nano))
	}
}

// issuerOf returns the iss claim of a token.
func issuerOf(t *testing.T, token string) string {
	t.Helper()
	parts := strings.Split(token, ".")
	raw, err := base64.RawURLEncoding.DecodeString(parts[1])
	var claims struct {
		Iss string `json:"iss"`
	}
	if err != nil || json.Unmarshal(raw, &claims) != nil || claims.Iss == "" {
		t.Fatalf("token %q: no issuer", token)
	}
	return claims.Iss
}
