package auth

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base32"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/errs"
	"golang.org/x/time/rate"
)

// Store is the storage port of the key registry: a KV bucket whose changes
// can be watched (natsjs.KV on the AGENTBUS_KEYS bucket).
type Store interface {
	bus.KV
	bus.KVWatcher
}

// API key format: "ab_<id>_<secret>", where id is 16 and secret 52
// characters of lower-case base32 (10 and 32 random bytes from
// crypto/rand). The id is public (it names the key in lists, logs and
// tokens); the whole key is the secret, stored only as its SHA-256.
const (
	KeyPrefix = "ab_"
	idBytes   = 10
	secBytes  = 32
	idLen     = 16 // base32 of 10 bytes, no padding
	secLen    = 52 // base32 of 32 bytes, no padding
	// KeyLen is the length of every API key.
	KeyLen = len(KeyPrefix) + idLen + 1 + secLen
)

var b32 = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// Key is the stored record of an API key. It never holds the key itself.
type Key struct {
	ID          string     `json:"id"`
	Hash        string     `json:"hash"` // "sha256:<hex>" of the whole key
	Tenants     []string   `json:"tenants"`
	Scopes      []Scope    `json:"scopes"`
	Description string     `json:"description,omitempty"`
	CreatedAt   time.Time  `json:"createdAt"`
	ExpiresAt   *time.Time `json:"expiresAt,omitempty"`
	RevokedAt   *time.Time `json:"revokedAt,omitempty"`
}

// KeyIDOf returns the id of a string shaped like an API key, with ok false
// when it is not one. It checks the shape only, not that the key exists.
func KeyIDOf(s string) (id string, ok bool) {
	if len(s) != KeyLen || !strings.HasPrefix(s, KeyPrefix) || s[len(KeyPrefix)+idLen] != '_' {
		return "", false
	}
	id, sec := s[len(KeyPrefix):len(KeyPrefix)+idLen], s[len(KeyPrefix)+idLen+1:]
	if !isB32(id) || !isB32(sec) {
		return "", false
	}
	return id, true
}

// ValidKeyID reports whether s has the shape of a key id.
func ValidKeyID(s string) bool { return len(s) == idLen && isB32(s) }

func isB32(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < 'a' || c > 'z') && (c < '2' || c > '7') {
			return false
		}
	}
	return true
}

func hashKey(secret string) [32]byte { return sha256.Sum256([]byte(secret)) }

func hashString(h [32]byte) string { return "sha256:" + hex.EncodeToString(h[:]) }

// NewKey returns a fresh random API key and its id.
func NewKey() (key, id string, err error) {
	var b [idBytes + secBytes]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", "", fmt.Errorf("random: %w", err)
	}
	id = b32.EncodeToString(b[:idBytes])
	return KeyPrefix + id + "_" + b32.EncodeToString(b[idBytes:]), id, nil
}

func storeKey(id string) string { return "key." + id }

// hashStoreKey is the store key of the entry naming the key whose hash is
// h: "hash.<hex>" -> its id.
func hashStoreKey(h [32]byte) string { return "hash." + hex.EncodeToString(h[:]) }

// Keys is the key registry: creation, listing and revocation in the
// store, and a local cache of every record kept current by a watch. The
// cache is the authority: a key it holds, with the right secret, is
// verified without the store. Any other API key — an id the cache does
// not know, or a wrong secret — costs the same, so that neither the answer
// nor its time tells which ids exist: one direct store read of the entry
// named by the presented key's hash ("hash.<sha256>", written with every
// key), which exists only for a right key, whatever the id. So a key
// created on another replica a moment ago, whose watch update has not
// arrived yet, is found (its record is then read by id), and a made-up id
// and a wrong secret are both "not found". A hash found missing is not
// read again for a second. The key behind a token (Active), whose id only
// a token agentbus signed can name, is read by id when the cache does not
// know it, and an id the store has no record of is remembered as missing
// for a second. All those direct reads are limited for the whole registry
// (storeReadsPerSecond): every well-formed key with a made-up id or a
// wrong secret would otherwise cost one, and callers reach Verify before
// any per-credential rate limit. Over the limit the key is refused as
// invalid without a read; a fresh key is then accepted once the watch
// delivers it, within milliseconds. A direct read that fails is not
// remembered: the caller gets the store's error (SERVICE_UNAVAILABLE when
// the store is unavailable), not a refusal. Safe for concurrent use.
type Keys struct {
	kv  Store
	log *slog.Logger
	now func() time.Time
	// reads limits direct store reads.
	reads *rate.Limiter

	mu     sync.RWMutex
	byID   map[string]*cached
	misses map[string]time.Time
	// hashMisses holds when each hash was last found missing.
	hashMisses map[[32]byte]time.Time
}

type cached struct {
	key  Key
	hash []byte // decoded Hash; nil when the record is unusable
}

// missTTL is how long an id or hash unknown to the store is not looked up
// again.
const missTTL = time.Second

// maxMisses bounds each miss cache; it is cleared when full.
const maxMisses = 10000

// storeReadsPerSecond and storeReadBurst bound the direct store reads of
// one registry (one replica), whoever asks.
const (
	storeReadsPerSecond = 20
	storeReadBurst      = 20
)

// NewKeys returns the registry on kv. Call Start before verifying keys.
func NewKeys(kv Store, log *slog.Logger) *Keys {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Keys{kv: kv, log: log, now: time.Now, reads: rate.NewLimiter(storeReadsPerSecond, storeReadBurst),
		byID: map[string]*cached{}, misses: map[string]time.Time{}, hashMisses: map[[32]byte]time.Time{}}
}

// Start loads every key record and keeps the cache current until ctx ends.
// It returns once the cache holds every record stored now.
func (k *Keys) Start(ctx context.Context) error {
	return k.kv.Watch(ctx, "key.*", k.apply)
}

func (k *Keys) apply(ch bus.KVChange) {
	id := strings.TrimPrefix(ch.Key, "key.")
	if ch.Deleted {
		k.mu.Lock()
		delete(k.byID, id)
		k.mu.Unlock()
		return
	}
	c, err := decodeKey(id, ch.Value)
	if err != nil {
		k.log.Warn("unusable key record ignored", "keyId", id, "err", err)
	}
	k.mu.Lock()
	k.byID[id] = c
	delete(k.misses, id)
	k.mu.Unlock()
}

func decodeKey(id string, raw []byte) (*cached, error) {
	var key Key
	if err := json.Unmarshal(raw, &key); err != nil {
		return &cached{key: Key{ID: id}}, err
	}
	c := &cached{key: key}
	h, ok := strings.CutPrefix(key.Hash, "sha256:")
	b, err := hex.DecodeString(h)
	if !ok || err != nil || len(b) != sha256.Size || key.ID != id {
		return &cached{key: key}, errors.New("bad hash or id")
	}
	c.hash = b
	return c, nil
}

// errReadsLimited is storeGet's answer when the registry's store read
// limit is spent: the store was not read.
var errReadsLimited = errors.New("key store read limit reached")

// lookup returns the record of id from the cache or, for an id the cache
// does not know, from the store (storeGet, remembering misses by id). It
// returns ErrNoSuchKey when the store has no record of id (now, or at a
// read less than missTTL ago), errReadsLimited when over the read limit,
// and the store's error when the read fails.
func (k *Keys) lookup(ctx context.Context, id string) (*cached, error) {
	k.mu.RLock()
	c, ok := k.byID[id]
	k.mu.RUnlock()
	if ok {
		return c, nil
	}
	raw, err := storeGet(ctx, k, k.misses, id, storeKey(id))
	switch {
	case errors.Is(err, errs.ErrNotFound):
		return nil, ErrNoSuchKey
	case errors.Is(err, errReadsLimited):
		return nil, err
	case err != nil:
		return nil, fmt.Errorf("read key %s: %w", id, err)
	}
	c, err = decodeKey(id, raw)
	if err != nil {
		k.log.Warn("unusable key record", "keyId", id, "err", err)
	}
	k.mu.Lock()
	if cur, ok := k.byID[id]; ok { // the watch was faster: it is newer
		c = cur
	} else {
		k.byID[id] = c
	}
	k.mu.Unlock()
	return c, nil
}

// storeGet reads the store entry key directly, for what the cache cannot
// answer, at most once per missTTL for what is missing and within the
// registry's store read limit: errs.ErrNotFound without a read when
// misses holds mk from a read less than missTTL ago, and after a read
// that finds nothing (remembered as mk in misses, cleared when it holds
// maxMisses); errReadsLimited without a read when the limit is spent;
// else the entry, or the store's error (not remembered).
func storeGet[K comparable](ctx context.Context, k *Keys, misses map[K]time.Time, mk K, key string) ([]byte, error) {
	now := k.now()
	k.mu.RLock()
	missed, wasMissed := misses[mk]
	k.mu.RUnlock()
	if wasMissed && now.Sub(missed) < missTTL {
		return nil, errs.ErrNotFound
	}
	if !k.reads.AllowN(now, 1) {
		return nil, errReadsLimited
	}
	gctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	raw, _, err := k.kv.Get(gctx, key)
	if errors.Is(err, errs.ErrNotFound) {
		k.mu.Lock()
		if len(misses) >= maxMisses {
			clear(misses)
		}
		misses[mk] = k.now()
		k.mu.Unlock()
	}
	return raw, err
}

// standIn is the hash a key is compared with when the cache has no usable
// record of its id, so that it costs what a wrong secret costs. No key
// hashes to it.
var standIn = make([]byte, sha256.Size)

// Verify checks an API key and returns its principal, or an UNAUTHENTICATED
// error: malformed, invalid (unknown id or wrong secret, not told apart,
// and after the same work, as Keys says; also when the store read limit is
// spent), expired or revoked (told only to a caller who holds the right
// secret). When the store cannot be read for a key the cache does not
// verify, the error is errs.Internal's: SERVICE_UNAVAILABLE with
// retryAfterSeconds for errs.ErrUnavailable, else INTERNAL_ERROR. The
// secret's hash is compared in constant time.
func (k *Keys) Verify(ctx context.Context, key string) (*Principal, error) {
	id, ok := KeyIDOf(key)
	if !ok {
		return nil, unauthenticated(ReasonMalformed, "the credential is not a well-formed API key")
	}
	h := hashKey(key)
	k.mu.RLock()
	c, known := k.byID[id]
	k.mu.RUnlock()
	want := standIn
	if known && c.hash != nil {
		want = c.hash
	}
	if subtle.ConstantTimeCompare(h[:], want) != 1 || !known || c.hash == nil {
		// An unknown id or a wrong secret, or a key created a moment ago
		// elsewhere: ask the store by the hash, the same read for each.
		var err error
		if c, err = k.fresh(ctx, id, h); err != nil {
			return nil, err
		}
	}
	if err := k.usable(&c.key); err != nil {
		return nil, err
	}
	return &Principal{ID: id, Kind: KindKey, Tenants: c.key.Tenants, Scopes: c.key.Scopes}, nil
}

// fresh returns the record of a key that the cache does not verify but
// the store knows by its hash h (created a moment ago on another replica),
// or UNAUTHENTICATED invalid when the store has no key of that hash (now,
// or at a read less than missTTL ago) or the read limit is spent, or
// errs.Internal's error when the store cannot be read.
func (k *Keys) fresh(ctx context.Context, id string, h [32]byte) (*cached, error) {
	invalid := unauthenticated(ReasonInvalid, "the credential is not valid")
	named, err := storeGet(ctx, k, k.hashMisses, h, hashStoreKey(h))
	switch {
	case errors.Is(err, errs.ErrNotFound), errors.Is(err, errReadsLimited):
		return nil, invalid
	case err != nil:
		return nil, errs.Internal(fmt.Errorf("read key hash: %w", err))
	case string(named) != id:
		return nil, invalid
	}
	c, err := k.record(ctx, id)
	if err != nil {
		return nil, err
	}
	if subtle.ConstantTimeCompare(h[:], c.hash) != 1 {
		return nil, invalid
	}
	return c, nil
}

// usable checks revocation and expiry of a verified key.
func (k *Keys) usable(key *Key) error {
	if key.RevokedAt != nil {
		return unauthenticated(ReasonRevoked, "the API key %s was revoked", key.ID)
	}
	if key.ExpiresAt != nil && !k.now().Before(*key.ExpiresAt) {
		return unauthenticated(ReasonExpired, "the API key %s expired", key.ID)
	}
	return nil
}

// Active returns the record of a key id still usable (known, not revoked,
// not expired), for checking the key behind a token. For an id the cache
// does not know it reads the store once (Keys says when), and fails like
// Verify: UNAUTHENTICATED (invalid, revoked or expired), or errs.Internal's
// error when the store cannot be read. Only for an id the store has no
// record of does the invalid error wrap ErrNoSuchKey (errors.Is).
func (k *Keys) Active(ctx context.Context, id string) (*Key, error) {
	c, err := k.record(ctx, id)
	if err != nil {
		return nil, err
	}
	if err := k.usable(&c.key); err != nil {
		return nil, err
	}
	key := c.key
	return &key, nil
}

// record looks id up (lookup) and answers as Active does: the usable
// record (its hash set), UNAUTHENTICATED invalid — wrapping ErrNoSuchKey
// when the store has no record of id — or errs.Internal's error when the
// store cannot be read.
func (k *Keys) record(ctx context.Context, id string) (*cached, error) {
	c, err := k.lookup(ctx, id)
	switch {
	case errors.Is(err, ErrNoSuchKey):
		e := unauthenticated(ReasonInvalid, "the credential is not valid")
		e.Err = ErrNoSuchKey
		return nil, e
	case errors.Is(err, errReadsLimited):
		return nil, unauthenticated(ReasonInvalid, "the credential is not valid")
	case err != nil:
		return nil, errs.Internal(err)
	case c.hash == nil:
		return nil, unauthenticated(ReasonInvalid, "the credential is not valid")
	}
	return c, nil
}

// NewKeyRequest describes a key to create.
type NewKeyRequest struct {
	Tenants     []string // tenant ids or "*"
	Scopes      []Scope
	Description string
	// TTL, when positive, makes the key expire that long after creation.
	TTL time.Duration
}

// Create makes a new random key, stores its record (never the key) and the
// entry naming it by its hash, and returns the key, to be shown once, with
// its record.
func (k *Keys) Create(ctx context.Context, req NewKeyRequest) (string, *Key, error) {
	if len(req.Tenants) == 0 {
		return "", nil, errors.New("a key needs at least one tenant (or *)")
	}
	if len(req.Scopes) == 0 {
		return "", nil, errors.New("a key needs at least one scope")
	}
	for _, s := range req.Scopes {
		if !slices.Contains(AllScopes, s) {
			return "", nil, fmt.Errorf("unknown scope %q", s)
		}
	}
	if len(req.Description) > 256 || strings.ContainsFunc(req.Description, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		return "", nil, errors.New("the description must be at most 256 printable characters")
	}
	secret, id, err := NewKey()
	if err != nil {
		return "", nil, err
	}
	now := k.now().UTC().Truncate(time.Second)
	h := hashKey(secret)
	rec := &Key{ID: id, Hash: hashString(h), Tenants: slices.Clone(req.Tenants), Scopes: slices.Clone(req.Scopes),
		Description: req.Description, CreatedAt: now}
	if req.TTL > 0 {
		exp := now.Add(req.TTL)
		rec.ExpiresAt = &exp
	}
	raw, _ := json.Marshal(rec)
	// The hash entry first, so that the record, once stored, can be found
	// by it; a hash entry whose record was never stored names nothing.
	if _, err := k.kv.Create(ctx, hashStoreKey(h), []byte(id)); err != nil {
		return "", nil, fmt.Errorf("store key %s: %w", id, err)
	}
	if _, err := k.kv.Create(ctx, storeKey(id), raw); err != nil {
		return "", nil, fmt.Errorf("store key %s: %w", id, err)
	}
	return secret, rec, nil
}

// List returns every key record in the cache (Start must have run), by
// creation time.
func (k *Keys) List() []Key {
	k.mu.RLock()
	out := make([]Key, 0, len(k.byID))
	for _, c := range k.byID {
		out = append(out, c.key)
	}
	k.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool {
		if !out[i].CreatedAt.Equal(out[j].CreatedAt) {
			return out[i].CreatedAt.Before(out[j].CreatedAt)
		}
		return out[i].ID < out[j].ID
	})
	return out
}

// ErrNoSuchKey is returned by Revoke for an id that was never stored, and
// wrapped by Active's error for an id the store has no record of.
var ErrNoSuchKey = errors.New("no such key")

// Revoke marks key id revoked in the store (compare-and-set, so a
// concurrent change is not lost). Every replica's watch sees it and refuses
// the key, and tokens issued to it, from then on. Revoking twice keeps the
// first time.
func (k *Keys) Revoke(ctx context.Context, id string) (*Key, error) {
	if !ValidKeyID(id) {
		return nil, fmt.Errorf("%q is not a key id", id)
	}
	for {
		raw, rev, err := k.kv.Get(ctx, storeKey(id))
		if errors.Is(err, errs.ErrNotFound) {
			return nil, ErrNoSuchKey
		}
		if err != nil {
			return nil, err
		}
		var rec Key
		if err := json.Unmarshal(raw, &rec); err != nil {
			return nil, fmt.Errorf("key %s: %w", id, err)
		}
		if rec.RevokedAt != nil {
			return &rec, nil
		}
		now := k.now().UTC().Truncate(time.Second)
		rec.RevokedAt = &now
		val, _ := json.Marshal(&rec)
		_, err = k.kv.Update(ctx, storeKey(id), val, rev)
		if errors.Is(err, errs.ErrConflict) {
			continue
		}
		if err != nil {
			return nil, err
		}
		return &rec, nil
	}
}
