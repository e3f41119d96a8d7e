package abuse_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/auth"
	"github.com/agentbus/agentbus/pkg/settings"
	"github.com/agentbus/agentbus/test/testkit"
)

// TestAuthFailuresThrottledPerAddress: a client address that keeps
// sending wrong credentials is answered 429 RATE_LIMITED with Retry-After
// after a small burst, also when it then sends a right one (a guess that
// succeeds must not be told apart), while a client at another address is
// served. The default settings are used.
func TestAuthFailuresThrottledPerAddress(t *testing.T) {
	t.Parallel()
	for _, typ := range []string{"bearer", "apikey-header"} {
		t.Run(typ, func(t *testing.T) {
			t.Parallel()
			s := auStart(t, typ)
			key, _ := s.mint(t, "default", auth.ScopeRead)
			header := map[string]string{"bearer": "Authorization", "apikey-header": auth.DefaultHeaderScheme}[typ]
			prefix := map[string]string{"bearer": "Bearer "}[typ]
			events := s.URL + "/events"
			attacker, user := auClient(t, "127.0.0.2"), auClient(t, "127.0.0.1")

			// Nothing sent is not a guess: a client may ask without
			// credentials first and read the challenge.
			for range 50 {
				if r := auDo(t, attacker, "GET", events, "", nil); r.Status != http.StatusUnauthorized {
					t.Fatalf("no credential: %d %s", r.Status, r.Body)
				}
			}
			const guesses = 300
			var unauthorized, limited int
			for i := range guesses {
				r := auDo(t, attacker, "GET", events, "", nil, header, prefix+auForged(t))
				switch r.Status {
				case http.StatusUnauthorized:
					unauthorized++
				case http.StatusTooManyRequests:
					limited++
					if r.code() != "RATE_LIMITED" {
						t.Fatalf("guess %d: 429 with code %q: %s", i, r.code(), r.Body)
					}
					auRetryAfter(t, fmt.Sprintf("guess %d", i), r, 60)
					if strings.Contains(string(r.Body), "ab_") {
						t.Fatalf("the refusal repeats the credential: %s", r.Body)
					}
				default:
					t.Fatalf("guess %d: %d %s", i, r.Status, r.Body)
				}
			}
			// The default burst is 30 and one more is allowed a second;
			// the run may take a while on a loaded machine.
			if unauthorized > 60 || limited < guesses-60 {
				t.Fatalf("%d guesses from one address: %d answered 401, %d 429; want at most 60 answered", guesses, unauthorized, limited)
			}
			if r := auDo(t, attacker, "GET", events, "", nil, header, prefix+key); r.Status != http.StatusTooManyRequests {
				t.Fatalf("the right key from the throttled address: %d %s", r.Status, r.Body)
			}
			for range 20 {
				if r := auDo(t, user, "GET", events, "", nil, header, prefix+key); r.Status != http.StatusOK {
					t.Fatalf("a client at another address: %d %s", r.Status, r.Body)
				}
			}
		})
	}
}

// TestTokenEndpointThrottled: the token endpoint answers wrong client
// secrets from one address with 429 after a small burst, without locking
// the client id out for its holder at another address; and it limits the
// tokens one client id obtains, without touching another client id.
func TestTokenEndpointThrottled(t *testing.T) {
	t.Parallel()
	s := auStart(t, "bearer")
	key, id := s.mint(t, "default", auth.ScopeRead)
	other, otherID := s.mint(t, "default", auth.ScopeRead)
	attacker, user := auClient(t, "127.0.0.3"), auClient(t, "127.0.0.1")

	const guesses = 200
	var unauthorized, limited int
	for i := range guesses {
		r := auTokenRequest(t, attacker, s.URL, id, "ab_"+id+"_"+strings.Repeat("a", 52), "")
		switch r.Status {
		case http.StatusUnauthorized:
			unauthorized++
		case http.StatusTooManyRequests:
			limited++
			auRetryAfter(t, fmt.Sprintf("guess %d", i), r, 60)
			if r.oauthError() == "" || r.Header.Get("Cache-Control") != "no-store" {
				t.Fatalf("guess %d: 429 is not an OAuth error answer: %v %s", i, r.Header, r.Body)
			}
		default:
			t.Fatalf("guess %d: %d %s", i, r.Status, r.Body)
		}
	}
	if unauthorized > 60 || limited < guesses-60 {
		t.Fatalf("%d wrong client secrets from one address: %d answered 401, %d 429; want at most 60 answered", guesses, unauthorized, limited)
	}
	// The holder of the key, elsewhere, still gets tokens.
	tok := auToken(t, user, s.URL, id, key, "")
	if r := auDo(t, user, "GET", s.URL+"/events", "", nil, "Authorization", "Bearer "+tok); r.Status != http.StatusOK {
		t.Fatalf("the token: %d %s", r.Status, r.Body)
	}

	// One client id asking again and again is limited (default burst 20),
	// another one is not.
	var issued, refused int
	for i := range 100 {
		r := auTokenRequest(t, user, s.URL, id, key, "")
		switch r.Status {
		case http.StatusOK:
			issued++
		case http.StatusTooManyRequests:
			refused++
			auRetryAfter(t, fmt.Sprintf("token %d", i), r, 60)
		default:
			t.Fatalf("token %d: %d %s", i, r.Status, r.Body)
		}
	}
	if issued > 40 || refused < 60 {
		t.Fatalf("100 token requests by one client id: %d issued, %d refused; want at most 40 issued", issued, refused)
	}
	auToken(t, user, s.URL, otherID, other, "")
	// Being limited as a client is not a failed authentication: the key
	// itself still works from that address.
	if r := auDo(t, user, "GET", s.URL+"/events", "", nil, "Authorization", "Bearer "+key); r.Status != http.StatusOK {
		t.Fatalf("the key after its token requests: %d %s", r.Status, r.Body)
	}
}

// TestAuthFailuresLoggedInAggregate: failed authentications are logged as
// a periodic warning with counts (per reason, the throttled ones, the
// busiest client addresses), not one line each, and never with the
// credential.
func TestAuthFailuresLoggedInAggregate(t *testing.T) {
	t.Parallel()
	const interval = 300 * time.Millisecond
	s := auStart(t, "bearer", func(c *settings.Config) { c.AuthLimits.LogInterval = settings.Duration(interval) })
	_, id := s.mint(t, "default", auth.ScopeRead)
	attacker := auClient(t, "127.0.0.4")
	began := time.Now()
	var sent []string
	answered := map[int]int{}
	for i := range 120 {
		cred := auForged(t)
		if i%3 == 0 {
			cred = "not-a-credential-" + strings.Repeat("x", i)
		}
		sent = append(sent, cred)
		var r *auResponse
		if i%4 == 0 {
			r = auTokenRequest(t, attacker, s.URL, id, cred, "")
		} else {
			r = auDo(t, attacker, "GET", s.URL+"/events", "", nil, "Authorization", "Bearer "+cred)
		}
		answered[r.Status]++
	}
	if answered[http.StatusUnauthorized] == 0 || answered[http.StatusTooManyRequests] == 0 || len(answered) != 2 {
		t.Fatalf("answers %v, want 401s then 429s", answered)
	}
	const msg = "authentication failures"
	var recs []map[string]any
	testkit.Eventually(t, "the failures logged", func() bool {
		recs = logRecords(t, s.log, msg)
		var failed, throttled float64
		for _, r := range recs {
			f, _ := r["failed"].(float64)
			th, _ := r["throttled"].(float64)
			failed, throttled = failed+f, throttled+th
		}
		return int(failed) == answered[http.StatusUnauthorized] && int(throttled) == answered[http.StatusTooManyRequests]
	})
	windows := int(time.Since(began)/interval) + 2
	if len(recs) > windows {
		t.Fatalf("%d warnings in %d windows of %s: not aggregated", len(recs), windows, interval)
	}
	for _, r := range recs {
		if r["level"] != "WARN" {
			t.Fatalf("level %v: %v", r["level"], r)
		}
		// A window may hold only throttled requests: reasons count the
		// failures.
		if _, ok := r["reasons"].(map[string]any); !ok && r["failed"] != float64(0) {
			t.Fatalf("no counts per reason: %v", r)
		}
		top, _ := json.Marshal(r["addresses"])
		if !strings.Contains(string(top), "127.0.0.4") {
			t.Fatalf("the busiest address is not named: %v", r)
		}
	}
	log := s.log.String()
	for _, cred := range sent {
		secret := cred
		if _, ok := auth.KeyIDOf(cred); ok {
			secret = cred[len(cred)-52:]
		}
		if strings.Contains(log, secret) {
			t.Fatalf("the log holds a credential: %s", log)
		}
	}
}

// TestTokenPowersFollowKey: a token carries at most what its key's record
// grants now: narrowing the key's scopes or tenants narrows its tokens
// issued earlier (within the key watch's delay), as revoking it revokes
// them.
func TestTokenPowersFollowKey(t *testing.T) {
	t.Parallel()
	s := auStart(t, "bearer", func(c *settings.Config) { c.Tenancy.Mode, c.Tenancy.Tenants = "multi", []string{"a", "b"} })
	key, id := s.mint(t, "a,b", auth.ScopeRead, auth.ScopeWrite)
	c := auClient(t, "127.0.0.1")
	tok := auToken(t, c, s.URL, id, key, "")
	bearer := []string{"Authorization", "Bearer " + tok}
	// A body that is refused after the scope check: 400 says the
	// credential may write, 403 that it may not.
	write := func(tenant string) int {
		return auDo(t, c, "POST", s.URL+"/"+tenant+"/commands", "application/json", []byte(`{}`), bearer...).Status
	}
	read := func(tenant string) int {
		return auDo(t, c, "GET", s.URL+"/"+tenant+"/events", "", nil, bearer...).Status
	}
	if write("a") != 400 || write("b") != 400 || read("a") != 200 || read("b") != 200 {
		t.Fatalf("the token before: write a %d, b %d; read a %d, b %d", write("a"), write("b"), read("a"), read("b"))
	}

	// The key is narrowed in the store: read only, tenant a only.
	ctx := context.Background()
	raw, rev, err := s.kv.Get(ctx, "key."+id)
	if err != nil {
		t.Fatal(err)
	}
	var rec auth.Key
	if err := json.Unmarshal(raw, &rec); err != nil {
		t.Fatal(err)
	}
	rec.Scopes, rec.Tenants = []auth.Scope{auth.ScopeRead}, []string{"a"}
	val, _ := json.Marshal(rec)
	if _, err := s.kv.Update(ctx, "key."+id, val, rev); err != nil {
		t.Fatal(err)
	}
	testkit.EventuallyWithin(t, "the narrowed key's token narrowed", 2*time.Second, func() bool {
		return write("a") == 403
	})
	if st := read("b"); st != 403 {
		t.Fatalf("the token reads tenant b after the key lost it: %d", st)
	}
	if st := read("a"); st != 200 {
		t.Fatalf("the token no longer reads tenant a: %d", st)
	}
	// A scope the key lost cannot be asked for either.
	if r := auTokenRequest(t, c, s.URL, id, key, "write"); r.Status != 400 || r.oauthError() != "invalid_scope" {
		t.Fatalf("token with a lost scope: %d %s", r.Status, r.Body)
	}
}

// TestUnknownKeyAndWrongSecretAlike: an API key with an id nobody issued
// and a real id with a wrong secret are answered alike and in the same
// time, so answers do not tell which key ids exist. Each id is probed
// once a second at most, as a prober learning which ids exist would, and
// slower than the registry's store read budget; each probe comes from one
// of many addresses, so neither budget nor throttle evens them out.
func TestUnknownKeyAndWrongSecretAlike(t *testing.T) {
	t.Parallel()
	s := auStart(t, "apikey-header")
	events := s.URL + "/events"
	const ids = 30
	wrong := make([]string, ids)
	clients := make([]*http.Client, ids)
	for i := range ids {
		key, _ := s.mint(t, "default", auth.ScopeRead)
		wrong[i] = key[:len(key)-1] + map[bool]string{true: "b", false: "a"}[strings.HasSuffix(key, "a")]
		clients[i] = auClient(t, fmt.Sprintf("127.0.1.%d", i+1))
		auDo(t, clients[i], "GET", events, "", nil) // opens the connection; nothing sent is not a guess
	}
	measure := func(c *http.Client, cred string) (time.Duration, string) {
		began := time.Now()
		r := auDo(t, c, "GET", events, "", nil, auth.DefaultHeaderScheme, cred)
		d := time.Since(began)
		if r.Status != http.StatusUnauthorized {
			t.Fatalf("%d %s", r.Status, r.Body)
		}
		return d, string(r.Body)
	}
	const pairs = 60 // each known id twice, 3.3 s apart
	var unknownTimes, wrongTimes []time.Duration
	var unknownBody, wrongBody string
	for i := range pairs {
		c := clients[i%ids]
		// Keep the server and the connection warm, without a guess,
		// until the next two probes are within the store read budget
		// (20 a second).
		for next := time.Now().Add(110 * time.Millisecond); time.Now().Before(next); {
			auDo(t, c, "GET", events, "", nil)
		}
		var d time.Duration
		if i%2 == 0 {
			d, unknownBody = measure(c, auForged(t))
			unknownTimes = append(unknownTimes, d)
			d, wrongBody = measure(c, wrong[i%ids])
			wrongTimes = append(wrongTimes, d)
		} else {
			d, wrongBody = measure(c, wrong[i%ids])
			wrongTimes = append(wrongTimes, d)
			d, unknownBody = measure(c, auForged(t))
			unknownTimes = append(unknownTimes, d)
		}
	}
	if unknownBody != wrongBody {
		t.Fatalf("answers differ: unknown id %s, wrong secret %s", unknownBody, wrongBody)
	}
	median := func(ds []time.Duration) time.Duration {
		s := slices.Clone(ds)
		slices.Sort(s)
		return s[len(s)/2]
	}
	mu, mw := median(unknownTimes), median(wrongTimes)
	ratio := float64(max(mu, mw)) / float64(min(mu, mw))
	t.Logf("median answer: unknown id %s, wrong secret %s (ratio %.2f)", mu, mw, ratio)
	if ratio > 1.6 {
		t.Fatalf("unknown id answered in %s at the median, wrong secret in %s: ratio %.2f, want at most 1.6", mu, mw, ratio)
	}
}
