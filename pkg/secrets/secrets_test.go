package secrets_test

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/errs"
	"github.com/agentbus/agentbus/pkg/natsjs"
	"github.com/agentbus/agentbus/pkg/natsjs/natsjstest"
	"github.com/agentbus/agentbus/pkg/secrets"
	"github.com/agentbus/agentbus/streams"
)

// bucket returns the secrets bucket as streams/ declares it, on an
// embedded nats-server of the test's own.
func bucket(t *testing.T) bus.KV {
	t.Helper()
	conn := natsjstest.Conn(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	specs, err := natsjs.LoadSpecs(streams.Files, natsjs.Settings{Prefix: "agentbus", DuplicateWindow: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	name := natsjs.NamesFor("agentbus").Secrets
	var mine []natsjs.Spec
	for _, sp := range specs {
		if sp.Name == name {
			mine = append(mine, sp)
		}
	}
	if len(mine) != 1 || mine[0].Kind != "kv" {
		t.Fatalf("streams/ declares %d buckets named %s", len(mine), name)
	}
	if err := conn.Apply(ctx, mine, nil); err != nil {
		t.Fatal(err)
	}
	kv, err := conn.KV(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	return kv
}

// clock is a settable time source.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

const (
	secretA = "whsec_" + "YWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWE=" // 32 bytes of 'a'
	secretB = "plain-secret-of-thirty-characters!"
	secretC = "whsec_" + "Y2NjY2NjY2NjY2NjY2NjY2NjY2NjY2Nj" // 24 bytes of 'c'
)

func TestProblem(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, secret string
		ok           bool
	}{
		{"generated form", secretA, true},
		{"whsec of 24 bytes", secretC, true},
		{"whsec unpadded", "whsec_YWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWE", true},
		{"plain 24 characters", strings.Repeat("x", 24), true},
		{"plain 256 characters", strings.Repeat("x", 256), true},
		{"plain, all printable", "!\"#$%&'()*+,-./0123456789:;<=>?@~", true},
		{"empty", "", false},
		{"23 characters", strings.Repeat("x", 23), false},
		{"257 characters", strings.Repeat("x", 257), false},
		{"a space", "secret with a space in it!!", false},
		{"a tab", "secret\twith-a-tab-in-it-0123", false},
		{"a newline", "secret\nwith-a-newline-01234", false},
		{"not ASCII", "sécret-sécret-sécret-sécret", false},
		{"whsec of 16 bytes", "whsec_" + base64.StdEncoding.EncodeToString(make([]byte, 16)), false},
		{"whsec of 65 bytes", "whsec_" + base64.StdEncoding.EncodeToString(make([]byte, 65)), false},
		{"whsec not base64", "whsec_not*base64*at*all*here*", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			why := secrets.Problem(tt.secret)
			if (why == "") != tt.ok {
				t.Fatalf("Problem = %q, want ok %v", why, tt.ok)
			}
			if tt.secret != "" && strings.Contains(why, tt.secret) {
				t.Fatalf("the problem quotes the secret: %q", why)
			}
		})
	}
}

func TestGenerate(t *testing.T) {
	t.Parallel()
	a, err := secrets.Generate()
	if err != nil {
		t.Fatal(err)
	}
	b, _ := secrets.Generate()
	if a == b || !strings.HasPrefix(a, "whsec_") || secrets.Problem(a) != "" {
		t.Fatalf("generated %q and %q", a, b)
	}
	if k := secrets.SigningKey(a); len(k) < 24 {
		t.Fatalf("a generated secret has %d key bytes, want at least 24", len(k))
	}
}

// TestSigningKeyGoldenVector: the signature of the Standard Webhooks
// specification's example, computed with SigningKey's key, is the one the
// specification gives: a whsec_ secret signs with the bytes its base64
// encodes. Any other secret signs with its own bytes.
func TestSigningKeyGoldenVector(t *testing.T) {
	t.Parallel()
	const (
		secret  = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
		msgID   = "msg_p5jXN8AQM9LWM0D4loKWxJek"
		stamp   = "1614265330"
		payload = `{"test": 2432232314}`
		want    = "g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
	)
	mac := hmac.New(sha256.New, secrets.SigningKey(secret))
	mac.Write([]byte(msgID + "." + stamp + "." + payload))
	if got := base64.StdEncoding.EncodeToString(mac.Sum(nil)); got != want {
		t.Fatalf("signature %s, want %s", got, want)
	}
	if k := secrets.SigningKey(secretB); string(k) != secretB {
		t.Fatalf("a plain secret signs with %q", k)
	}
}

func TestParseKey(t *testing.T) {
	t.Parallel()
	key := bytes.Repeat([]byte{0xfb}, 32)
	for _, s := range []string{base64.StdEncoding.EncodeToString(key), base64.RawStdEncoding.EncodeToString(key),
		base64.URLEncoding.EncodeToString(key), " " + base64.StdEncoding.EncodeToString(key) + "\n"} {
		if k, err := secrets.ParseKey(s); err != nil || !bytes.Equal(k, key) {
			t.Errorf("ParseKey(%q) = %x, %v", s, k, err)
		}
	}
	for _, s := range []string{"", "short", base64.StdEncoding.EncodeToString(key[:31]), base64.StdEncoding.EncodeToString(append(key, 1)), "not base64 at all, no: ~~~~~~~~~~~~~~~~"} {
		_, err := secrets.ParseKey(s)
		if err == nil {
			t.Errorf("ParseKey(%q) took it", s)
		} else if len(s) > 8 && strings.Contains(err.Error(), s) {
			t.Errorf("the error quotes the key: %v", err)
		}
	}
}

func open(t *testing.T, kv bus.KV, cfg secrets.Config) *secrets.Store {
	t.Helper()
	s, err := secrets.Open(context.Background(), kv, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func signing(t *testing.T, s *secrets.Store, tenant, id string) [][]byte {
	t.Helper()
	keys, err := s.Signing(context.Background(), tenant, id)
	if err != nil {
		t.Fatalf("Signing %s/%s: %v", tenant, id, err)
	}
	return keys
}

func sameKeys(t *testing.T, what string, got [][]byte, want ...string) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d signing keys, want %d", what, len(got), len(want))
	}
	for i := range want {
		if !bytes.Equal(got[i], secrets.SigningKey(want[i])) {
			t.Fatalf("%s: signing key %d is not the one of secret %d", what, i, i)
		}
	}
}

// TestRotation walks a subscription's secret through creation, a command
// sent again, rotations within and after the overlap, and deletion.
func TestRotation(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := &clock{now: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
	s := open(t, bucket(t), secrets.Config{Overlap: time.Hour, CacheTTL: 2 * time.Hour, Now: clk.Now})

	if err := s.Create(ctx, "acme", "sub-1", secretA); err != nil {
		t.Fatal(err)
	}
	sameKeys(t, "created", signing(t, s, "acme", "sub-1"), secretA)
	if err := s.Create(ctx, "acme", "sub-1", secretB); err != nil {
		t.Fatal(err)
	}
	sameKeys(t, "created again", signing(t, s, "acme", "sub-1"), secretA)
	current(t, s, "created", "acme", "sub-1", secretA)
	if _, err := s.Signing(ctx, "globex", "sub-1"); !errors.Is(err, errs.ErrNotFound) {
		t.Fatalf("another tenant's subscription of the same id: %v", err)
	}

	until, err := s.Rotate(ctx, "acme", "sub-1", secretB, "rotate-1")
	if err != nil {
		t.Fatal(err)
	}
	if want := clk.Now().Add(time.Hour); !until.Equal(want) {
		t.Fatalf("previous valid until %s, want %s", until, want)
	}
	sameKeys(t, "rotated", signing(t, s, "acme", "sub-1"), secretB, secretA)
	clk.Add(10 * time.Minute)
	again, err := s.Rotate(ctx, "acme", "sub-1", secretC, "rotate-1")
	if err != nil || !again.Equal(until) {
		t.Fatalf("the same rotation again: %s, %v", again, err)
	}
	sameKeys(t, "the same rotation again", signing(t, s, "acme", "sub-1"), secretB, secretA)

	clk.Add(50 * time.Minute) // the overlap is over, though the cache's TTL is not
	sameKeys(t, "after the overlap", signing(t, s, "acme", "sub-1"), secretB)

	if _, err := s.Rotate(ctx, "acme", "sub-1", secretC, "rotate-2"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Rotate(ctx, "acme", "sub-1", secretA, "rotate-3"); err != nil {
		t.Fatal(err)
	}
	sameKeys(t, "two rotations within the overlap", signing(t, s, "acme", "sub-1"), secretA, secretC)
	current(t, s, "two rotations within the overlap", "acme", "sub-1", secretA)
	if _, err := s.Current(ctx, "globex", "sub-1"); !errors.Is(err, errs.ErrNotFound) {
		t.Fatalf("Current of another tenant's subscription of the same id: %v", err)
	}

	if ok, err := s.Stored(ctx, "acme", "sub-1"); !ok || err != nil {
		t.Fatalf("Stored: %v %v", ok, err)
	}
	if err := s.Delete(ctx, "acme", "sub-1"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Signing(ctx, "acme", "sub-1"); !errors.Is(err, errs.ErrNotFound) {
		t.Fatalf("Signing after Delete: %v", err)
	}
	if ok, err := s.Stored(ctx, "acme", "sub-1"); ok || err != nil {
		t.Fatalf("Stored after Delete: %v %v", ok, err)
	}
	if _, err := s.Current(ctx, "acme", "sub-1"); !errors.Is(err, errs.ErrNotFound) {
		t.Fatalf("Current after Delete: %v", err)
	}
	if _, err := s.Rotate(ctx, "acme", "sub-1", secretB, "rotate-4"); !errors.Is(err, errs.ErrNotFound) {
		t.Fatalf("Rotate after Delete: %v", err)
	}
	if err := s.Delete(ctx, "acme", "sub-1"); err != nil {
		t.Fatalf("Delete twice: %v", err)
	}
	if err := s.Create(ctx, "acme", "sub-2", "too short"); err == nil || strings.Contains(err.Error(), "too short") {
		t.Fatalf("Create with a bad secret: %v", err)
	}
}

// current fails the test unless Current returns want.
func current(t *testing.T, s *secrets.Store, what, tenant, id, want string) {
	t.Helper()
	got, err := s.Current(context.Background(), tenant, id)
	if err != nil || got != want {
		t.Fatalf("%s: Current is not the secret set last (%v)", what, err)
	}
}

// TestEncryptedAtRest: what the bucket holds reveals neither the secret
// nor its key bytes; a value moved under another subscription's name does
// not decrypt; another key cannot read it; a store opened later on the
// same bucket without a key reads it (the generated key is kept); and one
// opened with a configured key reads both what the generated key sealed
// and what it seals itself.
func TestEncryptedAtRest(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	kv := bucket(t)
	gen := open(t, kv, secrets.Config{})
	if !gen.Generated() {
		t.Fatal("no key configured, yet the store does not say it generated one")
	}
	if err := gen.Create(ctx, "acme", "sub-1", secretA); err != nil {
		t.Fatal(err)
	}
	raw, _, err := kv.Get(ctx, secrets.Key("acme", "sub-1"))
	if err != nil {
		t.Fatal(err)
	}
	for _, leak := range []string{secretA, strings.TrimPrefix(secretA, "whsec_"), string(secrets.SigningKey(secretA)),
		base64.RawStdEncoding.EncodeToString(secrets.SigningKey(secretA))} {
		if bytes.Contains(raw, []byte(leak)) {
			t.Fatalf("the stored value holds the secret in clear: %s", raw)
		}
	}

	if _, err := kv.Put(ctx, secrets.Key("acme", "sub-2"), raw); err != nil {
		t.Fatal(err)
	}
	if _, err := gen.Signing(ctx, "acme", "sub-2"); err == nil {
		t.Fatal("a value moved under another subscription decrypted")
	} else if strings.Contains(err.Error(), secretA) {
		t.Fatalf("the error quotes the secret: %v", err)
	}

	sameKeys(t, "a second store on the generated key", signing(t, open(t, kv, secrets.Config{}), "acme", "sub-1"), secretA)

	other := open(t, bucket(t), secrets.Config{Key: bytes.Repeat([]byte{7}, 32)})
	if other.Generated() {
		t.Fatal("a configured key, yet the store says it generated one")
	}
	if _, err := other.Signing(ctx, "acme", "sub-1"); !errors.Is(err, errs.ErrNotFound) {
		t.Fatalf("another bucket: %v", err)
	}
	configured := open(t, kv, secrets.Config{Key: bytes.Repeat([]byte{7}, 32)})
	sameKeys(t, "configured key, entry sealed with the generated one", signing(t, configured, "acme", "sub-1"), secretA)
	if err := configured.Create(ctx, "acme", "sub-3", secretB); err != nil {
		t.Fatal(err)
	}
	raw3, _, _ := kv.Get(ctx, secrets.Key("acme", "sub-3"))
	if !bytes.Contains(raw3, []byte(secrets.KeyID(bytes.Repeat([]byte{7}, 32)))) {
		t.Fatalf("a new entry is not sealed with the configured key: %s", raw3)
	}
	// The configured key alone, without the generated one: what it sealed
	// reads, what the generated key sealed does not.
	if err := kv.Delete(ctx, secrets.GeneratedKeyName); err != nil {
		t.Fatal(err)
	}
	alone := open(t, kv, secrets.Config{Key: bytes.Repeat([]byte{7}, 32)})
	sameKeys(t, "configured key alone", signing(t, alone, "acme", "sub-3"), secretB)
	if _, err := alone.Signing(ctx, "acme", "sub-1"); err == nil || !strings.Contains(err.Error(), "subscriptions.secretKey") {
		t.Fatalf("an entry sealed with a key the store lacks: %v", err)
	}
	// A rotation is the way out: the new secret signs, alone.
	if _, err := alone.Rotate(ctx, "acme", "sub-1", secretC, "after-the-key-was-lost"); err != nil {
		t.Fatal(err)
	}
	sameKeys(t, "rotated after the key was lost", signing(t, alone, "acme", "sub-1"), secretC)
}

// TestGeneratedKeyAgreed: stores opening an empty bucket at once agree on
// one generated key.
func TestGeneratedKeyAgreed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	kv := bucket(t)
	stores := make([]*secrets.Store, 4)
	failed := make([]error, len(stores))
	var wg sync.WaitGroup
	for i := range stores {
		wg.Go(func() { stores[i], failed[i] = secrets.Open(ctx, kv, secrets.Config{}) })
	}
	wg.Wait()
	for _, err := range failed {
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := stores[0].Create(ctx, "acme", "sub-1", secretA); err != nil {
		t.Fatal(err)
	}
	for i, s := range stores {
		if keys, err := s.Signing(ctx, "acme", "sub-1"); err != nil || len(keys) != 1 {
			t.Fatalf("store %d: %v", i, err)
		}
	}
}
