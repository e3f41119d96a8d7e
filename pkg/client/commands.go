package client

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Command is a command given by its type and data; Send completes its
// envelope, as agentbus's typed MCP tools do.
type Command struct {
	// Type is the command type (PascalCase), one of the catalogue's.
	Type string
	// Version picks the schema version; "" for the newest the catalogue
	// lists.
	Version string
	// Data is the command's data, a JSON object; none is {}.
	Data json.RawMessage
	// ID is the envelope id; "" for a fresh random UUID. The same source
	// and id are the same command: sending it again returns its
	// correlation id and queues nothing.
	ID string
	// Source is the envelope source; "" for the Config's.
	Source string
	// Time is the envelope time; zero for now.
	Time time.Time
}

// Accepted is agentbus's answer to a command it stored: ID is the
// correlation id (the trace's id, the events' correlationId), Status
// "accepted".
type Accepted struct {
	ID     string `json:"id"`
	Status string `json:"status"`
}

// Envelope is a command or event envelope (CloudEvents 1.0, JSON).
type Envelope struct {
	SpecVersion     string          `json:"specversion"`
	ID              string          `json:"id"`
	Source          string          `json:"source"`
	Type            string          `json:"type"`
	DataContentType string          `json:"datacontenttype"`
	DataSchema      string          `json:"dataschema,omitempty"`
	Time            string          `json:"time"`
	Data            json.RawMessage `json:"data"`
}

// CatalogEntry is one command of the command catalogue (GET /commands).
type CatalogEntry struct {
	Type        string `json:"type"`
	Schema      string `json:"schema"`
	Version     string `json:"version"`
	DataSchema  string `json:"dataschema"`
	Description string `json:"description"`
}

// Commands returns the command catalogue: every command type and version.
func (c *Client) Commands(ctx context.Context) ([]CatalogEntry, error) {
	var out struct {
		Commands []CatalogEntry `json:"commands"`
	}
	if err := c.getJSON(ctx, "/commands", nil, &out); err != nil {
		return nil, err
	}
	return out.Commands, nil
}

// Complete returns the envelope of cmd: specversion 1.0, its id (a fresh
// UUID when empty), source, type, datacontenttype application/json, the
// dataschema {schema}/{version} the catalogue lists for the type (the
// newest version unless cmd.Version names one; the catalogue read is kept
// for catalogTTL, and read again at once for a type it lacks), time and data. A type the
// catalogue does not list gets the dataschema of its kebab-case name and
// version 1.0 (or cmd.Version), so that sending it is refused by agentbus
// with UNKNOWN_COMMAND_TYPE. It fails when the catalogue cannot be read or
// the data is not a JSON object.
func (c *Client) Complete(ctx context.Context, cmd Command) (*Envelope, error) {
	data := cmd.Data
	if len(strings.TrimSpace(string(data))) == 0 {
		data = json.RawMessage("{}")
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(data, &obj); err != nil || obj == nil {
		return nil, fmt.Errorf("client: the command data must be a JSON object")
	}
	cat, err := c.catalog(ctx, cmd.Type)
	if err != nil {
		return nil, err
	}
	schema, version := kebab(cmd.Type), "1.0"
	found := false
	for _, e := range cat {
		if e.Type != cmd.Type {
			continue
		}
		if !found || newer(e.Version, version) {
			schema, version = e.Schema, e.Version
		}
		found = true
	}
	if cmd.Version != "" {
		version = cmd.Version
	}
	env := &Envelope{SpecVersion: "1.0", ID: cmd.ID, Source: cmd.Source, Type: cmd.Type,
		DataContentType: "application/json", DataSchema: schema + "/" + version, Data: data}
	if env.ID == "" {
		env.ID = newUUID()
	}
	if env.Source == "" {
		env.Source = c.source
	}
	t := cmd.Time
	if t.IsZero() {
		t = time.Now()
	}
	env.Time = t.UTC().Format(time.RFC3339Nano)
	return env, nil
}

// catalogTTL is how long Complete keeps the command catalogue it read.
const catalogTTL = time.Minute

// catalog returns the command catalogue: the copy kept when it is younger
// than catalogTTL and lists typ, else a fresh read.
func (c *Client) catalog(ctx context.Context, typ string) ([]CatalogEntry, error) {
	c.mu.Lock()
	cat, at := c.cat, c.catRead
	c.mu.Unlock()
	if cat != nil && time.Since(at) < catalogTTL && slices.ContainsFunc(cat, func(e CatalogEntry) bool { return e.Type == typ }) {
		return cat, nil
	}
	cat, err := c.Commands(ctx)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.cat, c.catRead = cat, time.Now()
	c.mu.Unlock()
	return cat, nil
}

// Send completes cmd's envelope (see Complete) and submits it. It returns
// once agentbus has stored the command: its outcome comes later (Wait).
// Refusals are *Error: VALIDATION_FAILED with every violation,
// UNKNOWN_COMMAND_TYPE, UNAUTHENTICATED, FORBIDDEN, ...
func (c *Client) Send(ctx context.Context, cmd Command) (*Accepted, error) {
	env, err := c.Complete(ctx, cmd)
	if err != nil {
		return nil, err
	}
	body, err := json.Marshal(env)
	if err != nil {
		return nil, err
	}
	return c.SendEnvelope(ctx, body)
}

// SendEnvelope submits a complete command envelope as it is.
func (c *Client) SendEnvelope(ctx context.Context, envelope []byte) (*Accepted, error) {
	a, err := c.do(ctx, http.MethodPost, "/commands", nil, envelope)
	if err != nil {
		return nil, err
	}
	var acc Accepted
	if err := decode(a.body, &acc); err != nil {
		return nil, err
	}
	return &acc, nil
}

// SendAndWait sends cmd and waits for its outcome (see Wait).
func (c *Client) SendAndWait(ctx context.Context, cmd Command) (*Trace, error) {
	acc, err := c.Send(ctx, cmd)
	if err != nil {
		return nil, err
	}
	return c.Wait(ctx, acc.ID)
}

// Wait reads the trace of the command with correlation id until it has an
// outcome (Done: processed or rejected) and returns it; a rejected
// command's trace says why (Rejection, Err). It asks again every 100ms at
// first, every second at most, and returns ctx's error, with the last trace
// read, when ctx ends first: bound it with a deadline. A read agentbus
// answers busy (429, 503) is asked again, after the retryAfterSeconds the
// answer gives if longer; any other error is returned.
func (c *Client) Wait(ctx context.Context, id string) (*Trace, error) {
	delay := 100 * time.Millisecond
	var t *Trace
	for {
		read, err := c.Trace(ctx, id)
		wait := delay
		switch {
		case busy(err):
			wait = max(delay, retryAfter(err)) // as long as agentbus asks, at least
		case err != nil:
			return nil, err
		case read.Done():
			return read, nil
		default:
			t = read
		}
		if err := sleep(ctx, wait); err != nil {
			return t, err
		}
		delay = min(2*delay, time.Second)
	}
}

// newer reports whether version a is newer than b (dotted numbers).
func newer(a, b string) bool {
	as, bs := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; i < len(as) && i < len(bs); i++ {
		x, _ := strconv.Atoi(as[i])
		y, _ := strconv.Atoi(bs[i])
		if x != y {
			return x > y
		}
	}
	return len(as) > len(bs)
}

// kebab turns a PascalCase type into its schema name: PlaceOrder →
// place-order. Only ASCII capitals start a word, as in agentbus's own
// schema names (envelope.KebabCase).
func kebab(typ string) string {
	var b strings.Builder
	for i, r := range typ {
		if r >= 'A' && r <= 'Z' {
			if i > 0 {
				b.WriteByte('-')
			}
			r += 'a' - 'A'
		}
		b.WriteRune(r)
	}
	return b.String()
}

// newUUID returns a random (version 4) UUID.
func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}

// pathID escapes an id as one path segment.
func pathID(id string) string { return url.PathEscape(id) }
