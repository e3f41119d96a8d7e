package bearer_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/bearer"
	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/errs"
)

// memKV is an in-memory bus.KV holding the signing secret.
type memKV struct {
	mu   sync.Mutex
	vals map[string][]byte
}

var _ bus.KV = (*memKV)(nil)

func (m *memKV) Get(_ context.Context, key string) ([]byte, uint64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	v, ok := m.vals[key]
	if !ok {
		return nil, 0, errs.ErrNotFound
	}
	return v, 1, nil
}

func (m *memKV) Create(_ context.Context, key string, val []byte) (uint64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.vals[key]; ok {
		return 0, errs.ErrConflict
	}
	m.vals[key] = val
	return 1, nil
}

func (m *memKV) Update(context.Context, string, []byte, uint64) (uint64, error) {
	return 0, errors.New("not used")
}
func (m *memKV) Put(context.Context, string, []byte) (uint64, error) {
	return 0, errors.New("not used")
}
func (m *memKV) Delete(context.Context, string) error { return errors.New("not used") }

func TestSigningKeySharedOnce(t *testing.T) {
	t.Parallel()
	kv := &memKV{vals: map[string][]byte{}}
	k1, err := bearer.SigningKey(context.Background(), kv)
	if err != nil {
		t.Fatal(err)
	}
	k2, err := bearer.SigningKey(context.Background(), kv)
	if err != nil || string(k1) != string(k2) || len(k1) < bearer.MinSigningKeyLen {
		t.Fatalf("second replica got another key: %v", err)
	}
}

// TestSigningKeyUnusable: a stored secret that is not 32 bytes of base64
// is refused, naming the entry to delete, and is left as it is.
func TestSigningKeyUnusable(t *testing.T) {
	t.Parallel()
	for _, stored := range []string{"not base64!", "c2hvcnQ", strings.Repeat("QUFB", 12)} {
		kv := &memKV{vals: map[string][]byte{"signing.hs256": []byte(stored)}}
		_, err := bearer.SigningKey(context.Background(), kv)
		if err == nil || !strings.Contains(err.Error(), "delete signing.hs256 from the keys bucket") {
			t.Errorf("stored %q: %v", stored, err)
		}
		if string(kv.vals["signing.hs256"]) != stored {
			t.Errorf("stored %q: replaced", stored)
		}
	}
}

// TestVerify covers a token's round trip and the sentinel errors of Verify.
func TestVerify(t *testing.T) {
	t.Parallel()
	key := []byte(strings.Repeat("k", bearer.MinSigningKeyLen))
	clock := time.Date(2026, 1, 2, 15, 4, 5, 0, time.UTC)
	now := func() time.Time { return clock }
	noAdmin := func(s string) error {
		if strings.Contains(s, "admin") {
			return errors.New("no admin")
		}
		return nil
	}
	tk := bearer.New(key, "http://bus", time.Minute, now, noAdmin)
	ok, _, err := tk.Issue("k1", []string{"default"}, "read write", "")
	if err != nil {
		t.Fatal(err)
	}
	c, err := tk.Verify(ok)
	if err != nil || c.Subject != "k1" || c.Scope != "read write" || c.Tenants[0] != "default" || !bearer.LooksLikeJWT(ok) {
		t.Fatalf("round trip: %v %+v", err, c)
	}
	admin, _, _ := tk.Issue("k1", []string{"default"}, "admin", "")
	other, _, _ := bearer.New([]byte(strings.Repeat("o", 32)), "http://bus", time.Minute, now, nil).Issue("k1", []string{"default"}, "read", "")
	for name, tc := range map[string]struct {
		raw  string
		want error
	}{
		"malformed":     {"a.b.c", bearer.ErrMalformed},
		"scope refused": {admin, bearer.ErrInvalid},
		"other key":     {other, bearer.ErrInvalid},
	} {
		if _, err := tk.Verify(tc.raw); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", name, err, tc.want)
		}
	}
	clock = clock.Add(2 * time.Minute)
	if _, err := tk.Verify(ok); !errors.Is(err, bearer.ErrExpired) {
		t.Fatalf("remembered token after expiry: %v", err)
	}
	if bearer.LooksLikeJWT("a.b") || bearer.LooksLikeJWT("a..c") || bearer.LooksLikeJWT("a.b.c+") {
		t.Fatal("LooksLikeJWT accepts a non-JWS")
	}
}
