package secrets

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/errs"
)

// keyBytes is the size of an encryption key (AES-256).
const keyBytes = 32

// GeneratedKeyName is the bucket key under which agentbus keeps the
// encryption key it generated when none is configured. No subscription's
// key can be it: those are "<tenant>.<id>", and it has no dot.
const GeneratedKeyName = "_encryption-key"

// Config tunes a Store. Zero values take the defaults noted.
type Config struct {
	// Key is the AES-256 encryption key (32 bytes). Nil: the key the
	// bucket keeps under GeneratedKeyName, generated at the first start.
	Key []byte
	// Overlap is how long a replaced secret keeps signing after a
	// rotation (default 24h).
	Overlap time.Duration
	// CacheTTL is how long Signing keeps a subscription's keys in memory
	// (default 5s): a rotation on another replica reaches this one's
	// deliveries within it (the previous secret, still valid, signs
	// meanwhile).
	CacheTTL time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// Store keeps the secrets of subscriptions in a bucket, one entry per
// subscription under "<tenant>.<id>", each secret encrypted with
// AES-256-GCM (a random nonce per value; the entry's key as additional
// data, so a value copied under another key does not decrypt). Safe for
// concurrent use.
type Store struct {
	kv        bus.KV
	aeads     map[string]cipher.AEAD // by key id
	primary   string                 // the key id new values are encrypted with
	generated bool
	overlap   time.Duration
	ttl       time.Duration
	now       func() time.Time

	mu    sync.Mutex
	cache map[string]cached
}

type cached struct {
	keys  [][]byte
	until time.Time
}

// Open returns the store on kv. With no key configured it uses the key the
// bucket keeps under GeneratedKeyName, generating and storing one at the
// first start (create-if-absent, so replicas starting together agree);
// Generated then reports true. With one configured, a generated key the
// bucket still holds stays usable for reading what was encrypted with it.
func Open(ctx context.Context, kv bus.KV, cfg Config) (*Store, error) {
	s := &Store{kv: kv, aeads: map[string]cipher.AEAD{}, overlap: cfg.Overlap, ttl: cfg.CacheTTL, now: cfg.Now,
		cache: map[string]cached{}}
	if s.overlap <= 0 {
		s.overlap = 24 * time.Hour
	}
	if s.ttl <= 0 {
		s.ttl = 5 * time.Second
	}
	if s.now == nil {
		s.now = time.Now
	}
	if cfg.Key != nil {
		if len(cfg.Key) != keyBytes {
			return nil, fmt.Errorf("secrets: the encryption key must be %d bytes", keyBytes)
		}
		id, err := s.addKey(cfg.Key)
		if err != nil {
			return nil, err
		}
		s.primary = id
		if k, err := storedKey(ctx, kv); err == nil {
			if _, err := s.addKey(k); err != nil {
				return nil, err
			}
		} else if !errors.Is(err, errs.ErrNotFound) {
			return nil, err
		}
		return s, nil
	}
	k, err := generatedKey(ctx, kv)
	if err != nil {
		return nil, err
	}
	if s.primary, err = s.addKey(k); err != nil {
		return nil, err
	}
	s.generated = true
	return s, nil
}

// Generated reports whether the store encrypts with the key it keeps in
// the bucket itself (none was configured): then whoever can read the
// bucket can decrypt the secrets.
func (s *Store) Generated() bool { return s.generated }

// KeyID names an encryption key without revealing it: the first 4 bytes
// of a SHA-256 of it, in hex.
func KeyID(key []byte) string {
	h := sha256.Sum256(append([]byte("agentbus secrets key\x00"), key...))
	return hex.EncodeToString(h[:4])
}

func (s *Store) addKey(k []byte) (string, error) {
	block, err := aes.NewCipher(k)
	if err != nil {
		return "", fmt.Errorf("secrets: %w", err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return "", fmt.Errorf("secrets: %w", err)
	}
	id := KeyID(k)
	s.aeads[id] = aead
	return id, nil
}

// storedKey reads the generated key the bucket keeps, or errs.ErrNotFound.
func storedKey(ctx context.Context, kv bus.KV) ([]byte, error) {
	return keyErr(bus.StoredKey(ctx, kv, GeneratedKeyName, keyBytes))
}

// generatedKey returns the bucket's generated key, storing a fresh one when
// there is none.
func generatedKey(ctx context.Context, kv bus.KV) ([]byte, error) {
	return keyErr(bus.AgreedKey(ctx, kv, GeneratedKeyName, keyBytes))
}

// keyErr puts the errors of the generated key in the store's terms;
// errs.ErrNotFound passes as it is.
func keyErr(k []byte, err error) ([]byte, error) {
	switch {
	case err == nil, errors.Is(err, errs.ErrNotFound):
		return k, err
	case errors.Is(err, bus.ErrUnusableKey):
		return nil, errors.New("secrets: the stored encryption key " + GeneratedKeyName + " is unusable")
	default:
		return nil, fmt.Errorf("secrets: the encryption key: %w", err)
	}
}

// Key is a subscription's entry name in the bucket.
func Key(tenant, id string) string { return tenant + "." + id }

// record is a subscription's entry.
type record struct {
	Current sealed `json:"current"`
	// Previous signs too until PreviousUntil.
	Previous      *sealed `json:"previous,omitempty"`
	PreviousUntil string  `json:"previousUntil,omitempty"`
	// SetBy is the correlation id of the command that set Current, so the
	// same command stores nothing twice.
	SetBy     string `json:"setBy"`
	UpdatedAt string `json:"updatedAt"`
}

// sealed is one encrypted secret: the key id and base64(nonce ‖ ciphertext).
type sealed struct {
	KeyID string `json:"kid"`
	Value string `json:"ct"`
}

func (s *Store) seal(name, secret string) (sealed, error) {
	aead := s.aeads[s.primary]
	nonce := make([]byte, aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return sealed{}, err
	}
	ct := aead.Seal(nonce, nonce, []byte(secret), []byte(name))
	return sealed{KeyID: s.primary, Value: base64.StdEncoding.EncodeToString(ct)}, nil
}

func (s *Store) open(name string, v sealed) (string, error) {
	aead, ok := s.aeads[v.KeyID]
	if !ok {
		return "", fmt.Errorf("secrets: the secret of %s is encrypted with key %s, which this agentbus does not have (was subscriptions.secretKey changed?)", name, v.KeyID)
	}
	raw, err := base64.StdEncoding.DecodeString(v.Value)
	if err != nil || len(raw) < aead.NonceSize() {
		return "", fmt.Errorf("secrets: the secret of %s is damaged", name)
	}
	pt, err := aead.Open(nil, raw[:aead.NonceSize()], raw[aead.NonceSize():], []byte(name))
	if err != nil {
		return "", fmt.Errorf("secrets: the secret of %s does not decrypt with key %s", name, v.KeyID)
	}
	return string(pt), nil
}

func (s *Store) read(ctx context.Context, name string) (*record, uint64, error) {
	raw, rev, err := s.kv.Get(ctx, name)
	if err != nil {
		return nil, 0, err
	}
	var r record
	if err := json.Unmarshal(raw, &r); err != nil {
		return nil, 0, fmt.Errorf("secrets: the entry of %s does not decode", name)
	}
	return &r, rev, nil
}

// Create stores the secret of a new subscription. An entry already there
// is left as it is and nil returned: a command sent again (same
// correlation id, so the same subscription id) keeps the secret it was
// first sent with, as it keeps everything else. The secret must pass
// Problem.
func (s *Store) Create(ctx context.Context, tenant, id, secret string) error {
	if why := Problem(secret); why != "" {
		return errors.New("secrets: the secret " + why)
	}
	name := Key(tenant, id)
	cur, err := s.seal(name, secret)
	if err != nil {
		return err
	}
	val, _ := json.Marshal(record{Current: cur, SetBy: id, UpdatedAt: s.stamp()})
	_, err = s.kv.Create(ctx, name, val)
	if errors.Is(err, errs.ErrConflict) {
		return nil
	}
	return err
}

// Rotate makes secret the current secret of subscription id, on behalf of
// the command by (its correlation id); the one it replaces keeps signing
// until the returned time (now + the overlap) — unless no key here
// decrypts it (the key it was sealed with is lost): then it is dropped
// and the time returned is now. Rotating again on behalf of the same
// command changes nothing and returns the time the first one set. A
// second rotation within the overlap drops the oldest secret: at most two
// sign. Errors: errs.ErrNotFound when the subscription has no entry.
func (s *Store) Rotate(ctx context.Context, tenant, id, secret, by string) (time.Time, error) {
	if why := Problem(secret); why != "" {
		return time.Time{}, errors.New("secrets: the secret " + why)
	}
	name := Key(tenant, id)
	defer s.forget(name)
	for range 5 {
		r, rev, err := s.read(ctx, name)
		if err != nil {
			return time.Time{}, err
		}
		if r.SetBy == by {
			until, _ := time.Parse(time.RFC3339Nano, r.PreviousUntil)
			return until, nil
		}
		cur, err := s.seal(name, secret)
		if err != nil {
			return time.Time{}, err
		}
		until := s.now().Add(s.overlap).UTC()
		next := record{Current: cur, SetBy: by, UpdatedAt: s.stamp()}
		// The replaced secret signs on, sealed anew with the current key;
		// one that no key here opens (its key was lost) is dropped: the
		// rotation is then the way to a working secret.
		if old, err := s.open(name, r.Current); err == nil {
			prev, err := s.seal(name, old)
			if err != nil {
				return time.Time{}, err
			}
			next.Previous, next.PreviousUntil = &prev, until.Format(time.RFC3339Nano)
		} else {
			until = s.now().UTC()
		}
		val, _ := json.Marshal(next)
		_, err = s.kv.Update(ctx, name, val, rev)
		if errors.Is(err, errs.ErrConflict) {
			continue // changed meanwhile (another rotation, a deletion): read again
		}
		if err != nil {
			return time.Time{}, err
		}
		return until, nil
	}
	return time.Time{}, fmt.Errorf("secrets: the secret of %s keeps changing; try again", name)
}

// Current returns the current secret of subscription id as it was given
// or generated (the one a rotation set last), for its owner to configure a
// receiver with. Errors: errs.ErrNotFound when the subscription has no
// secret; any other names the subscription, never the secret.
func (s *Store) Current(ctx context.Context, tenant, id string) (string, error) {
	name := Key(tenant, id)
	r, _, err := s.read(ctx, name)
	if err != nil {
		return "", err
	}
	return s.open(name, r.Current)
}

// Signing returns the HMAC keys that sign the deliveries of subscription
// id (SigningKey of each secret): the current one first and, during the
// overlap after a rotation, the previous one. The slices are the
// caller's. They are kept in memory for CacheTTL (never past the end of an
// overlap). Errors: errs.ErrNotFound when the subscription has no secret.
// Safe for concurrent use.
func (s *Store) Signing(ctx context.Context, tenant, id string) ([][]byte, error) {
	name := Key(tenant, id)
	now := s.now()
	s.mu.Lock()
	c, ok := s.cache[name]
	s.mu.Unlock()
	if !ok || !now.Before(c.until) {
		r, _, err := s.read(ctx, name)
		if err != nil {
			return nil, err
		}
		cur, err := s.open(name, r.Current)
		if err != nil {
			return nil, err
		}
		c = cached{keys: [][]byte{SigningKey(cur)}, until: now.Add(s.ttl)}
		if until, perr := time.Parse(time.RFC3339Nano, r.PreviousUntil); r.Previous != nil && perr == nil && now.Before(until) {
			prev, err := s.open(name, *r.Previous)
			if err != nil {
				return nil, err
			}
			c.keys = append(c.keys, SigningKey(prev))
			c.until = minTime(c.until, until)
		}
		s.remember(name, c, now)
	}
	out := make([][]byte, len(c.keys))
	for i, k := range c.keys {
		out[i] = append([]byte(nil), k...)
	}
	return out, nil
}

// maxCached bounds the cache before expired entries are swept out.
const maxCached = 4096

func (s *Store) remember(name string, c cached, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.cache) >= maxCached {
		for k, v := range s.cache {
			if !now.Before(v.until) {
				delete(s.cache, k)
			}
		}
	}
	s.cache[name] = c
}

func (s *Store) forget(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.cache, name)
}

// Stored reports whether subscription id has a secret. A read that finds
// none is tried again for about half a second: right after Create another
// replica of a clustered bucket may not have it yet.
func (s *Store) Stored(ctx context.Context, tenant, id string) (bool, error) {
	name := Key(tenant, id)
	for wait := 20 * time.Millisecond; ; wait *= 2 {
		_, _, err := s.kv.Get(ctx, name)
		switch {
		case err == nil:
			return true, nil
		case !errors.Is(err, errs.ErrNotFound):
			return false, err
		case wait > 200*time.Millisecond:
			return false, nil
		}
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-time.After(wait):
		}
	}
}

// Delete erases the secret of subscription id; nil when it has none.
func (s *Store) Delete(ctx context.Context, tenant, id string) error {
	name := Key(tenant, id)
	defer s.forget(name)
	if err := s.kv.Delete(ctx, name); err != nil && !errors.Is(err, errs.ErrNotFound) {
		return err
	}
	return nil
}

func (s *Store) stamp() string { return s.now().UTC().Format(time.RFC3339Nano) }

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}
