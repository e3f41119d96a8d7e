package query

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"sync"
	"sync/atomic"

	"github.com/agentbus/agentbus/pkg/webhook/record"
)

// A cursor is where a page of events, or a live stream, goes on: after an
// event of the log. On the wire it is opaque, so that a tenant learns
// nothing of the events of others from it: the log's sequence of that
// event and a tag naming the tenant and the log, 16 bytes enciphered with
// AES-256 under a key every replica shares (CursorKeyName) and written as
// 22 characters of unpadded base64url. One position formats to one cursor;
// two cursors tell a reader nothing but whether they are equal, not the
// distance between them. A cursor of another tenant or log, or one changed
// by a single bit, does not decipher to its tag (but with odds of 2^-64)
// and is refused. "0" (and
// "") is the start of the log, the one cursor a caller writes itself; a
// number other than 0 is refused, since a reader trying numbers could learn
// the sequences of its own events and so how many others were written
// between them (docs/decisions.md).

// CursorKeyName is the key under which agentbus keeps the cursor key in
// its secrets bucket (created once, agreed on by every replica; see
// bus.AgreedKey), and CursorKeyBytes its size.
const (
	CursorKeyName  = "_cursor-key"
	CursorKeyBytes = 32
)

// cursorEncoding writes cursors: unpadded base64url, strict, so that one
// cursor has one spelling.
var cursorEncoding = base64.RawURLEncoding.Strict()

// startCursor is the cursor of the start of a log.
const startCursor = "0"

// cursorLen is the length of a formatted cursor (16 bytes in base64url).
const cursorLen = 22

// ErrBadCursor is returned for a cursor that is not one this tenant was
// given for this log.
var ErrBadCursor = errors.New("not a cursor of this tenant's events")

// cursors formats and reads cursors. Safe for concurrent use.
type cursors struct {
	block cipher.Block
	tags  []byte // HMAC key of the tenant and log tags
	// known holds the tags computed so far (tagKey → tag), up to
	// maxKnownTags of them: a tag depends on its tenant and log alone, and
	// every cursor formatted or read needs one.
	known  sync.Map
	nKnown atomic.Int32
}

// maxKnownTags bounds the tags cursors keep (one per tenant and log);
// past it a tag is computed each time.
const maxKnownTags = 4096

// tagKey names a tag: a tenant and its log.
type tagKey struct {
	tenant    string
	synthetic bool
}

// newCursors returns the cursors of key (nil: a random key, whose
// cursors this process alone reads). The cipher's key and the tags' key
// are derived from it with HKDF-SHA256, one for each use.
func newCursors(key []byte) *cursors {
	if len(key) == 0 {
		key = make([]byte, CursorKeyBytes)
		_, _ = rand.Read(key) // never fails (crypto/rand)
	}
	block, err := aes.NewCipher(derive(key, "agentbus cursor cipher"))
	if err != nil {
		panic("query: AES-256 refused a 32-byte key: " + err.Error())
	}
	return &cursors{block: block, tags: derive(key, "agentbus cursor tags")}
}

// derive is 32 bytes of HKDF-SHA256 of key for purpose.
func derive(key []byte, purpose string) []byte {
	k, err := hkdf.Key(sha256.New, key, nil, purpose, 32)
	if err != nil { // only for a length HKDF cannot give; 32 it can
		panic("query: " + err.Error())
	}
	return k
}

// tag is the 8 bytes that bind a cursor to tenant and log.
func (c *cursors) tag(tenant string, synthetic bool) [8]byte {
	k := tagKey{tenant, synthetic}
	if t, ok := c.known.Load(k); ok {
		return t.([8]byte)
	}
	m := hmac.New(sha256.New, c.tags)
	log := "events\x00"
	if synthetic {
		log = "synthetic\x00"
	}
	m.Write([]byte(log))
	m.Write([]byte(tenant))
	var t [8]byte
	copy(t[:], m.Sum(nil))
	if c.nKnown.Load() < maxKnownTags {
		if _, loaded := c.known.LoadOrStore(k, t); !loaded {
			c.nKnown.Add(1)
		}
	}
	return t
}

// format returns the cursor of position seq in tenant's events (of the
// injected events' log when synthetic).
func (c *cursors) format(tenant string, synthetic bool, seq uint64) string {
	if seq == 0 {
		return startCursor
	}
	var b [aes.BlockSize]byte
	binary.BigEndian.PutUint64(b[:8], seq)
	t := c.tag(tenant, synthetic)
	copy(b[8:], t[:])
	c.block.Encrypt(b[:], b[:])
	return cursorEncoding.EncodeToString(b[:])
}

// parse returns the position a cursor names: 0 for "" and "0", else the
// sequence format was given, or ErrBadCursor.
func (c *cursors) parse(tenant string, synthetic bool, s string) (uint64, error) {
	if s == "" || s == startCursor {
		return 0, nil
	}
	if len(s) != cursorLen {
		return 0, ErrBadCursor
	}
	raw, err := cursorEncoding.DecodeString(s)
	if err != nil || len(raw) != aes.BlockSize {
		return 0, ErrBadCursor
	}
	var b [aes.BlockSize]byte
	c.block.Decrypt(b[:], raw)
	seq := binary.BigEndian.Uint64(b[:8])
	t := c.tag(tenant, synthetic)
	if subtle.ConstantTimeCompare(b[8:], t[:]) != 1 || seq == 0 || seq >= 1<<63 {
		return 0, ErrBadCursor
	}
	return seq, nil
}

// DeliveryRecord is the wire form of a webhook delivery record: the
// record, with the event's place in the log as its cursor rather than its
// sequence (replaySubscription's after takes it).
type DeliveryRecord struct {
	Subscription string           `json:"subscriptionId"`
	EventID      string           `json:"eventId"`
	EventType    string           `json:"eventType,omitempty"`
	Cursor       string           `json:"cursor"`
	Correlation  string           `json:"correlationId,omitempty"`
	Status       string           `json:"status"`
	Attempts     []record.Attempt `json:"attempts"`
}

// DeliveryRecords returns the wire form of tenant's delivery records, in
// their order; never nil.
func (rd *Reader) DeliveryRecords(tenant string, recs []record.Delivery) []DeliveryRecord {
	out := make([]DeliveryRecord, len(recs))
	for i, d := range recs {
		out[i] = DeliveryRecord{Subscription: d.Subscription, EventID: d.EventID, EventType: d.EventType,
			Cursor: rd.Cursor(tenant, false, d.EventSeq), Correlation: d.Correlation, Status: d.Status, Attempts: d.Attempts}
	}
	return out
}
