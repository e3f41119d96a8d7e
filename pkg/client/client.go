// Package client is a Go client of agentbus's REST API: it sends commands
// (completing their envelopes) and waits for their outcome, reads and
// follows the event log (over Server-Sent Events, resuming where it left
// off), reads traces and drives the registries of agents, services and
// webhook subscriptions. Every refusal comes back as an *Error carrying the
// API's error code. It imports nothing of agentbus's server side, only the
// standard library.
//
// A Client is safe for concurrent use.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
)

// DefaultURL is the address a Config without URL reaches: agentbus's
// default listen address.
const DefaultURL = "http://127.0.0.1:8080"

// DefaultSource is the envelope source of the commands Send completes
// when neither the Command nor the Config names one.
const DefaultSource = "agentbus-client"

// Config says which agentbus a Client reaches and as whom.
type Config struct {
	// URL is agentbus's base address (DefaultURL when empty): scheme,
	// host and an optional path prefix, as the discovery manifest's
	// rest.endpoint gives it.
	URL string
	// Tenant, in multi-tenant mode, is the tenant every resource route is
	// prefixed with (/{tenant}/commands); empty in single-tenant mode.
	Tenant string
	// Key is an API key. It is sent as "Authorization: Bearer <key>" (the
	// bearer method) and as the X-API-Key header (the apikey-header
	// method); agentbus reads the one its method names.
	Key string
	// Token is a bearer token from /oauth/token, sent as "Authorization:
	// Bearer <token>". Key and Token are exclusive.
	Token string
	// Source is the envelope source of the commands Send completes
	// (DefaultSource when empty).
	Source string
	// HTTPClient makes the requests; http.DefaultClient when nil. Its
	// Timeout, if any, also cuts live streams: Follow reconnects.
	HTTPClient *http.Client
}

// Client calls one agentbus. Safe for concurrent use.
type Client struct {
	base   *url.URL
	cfg    Config
	hc     *http.Client
	source string

	mu      sync.Mutex
	cat     []CatalogEntry // the command catalogue Complete last read
	catRead time.Time
}

// New returns a Client for cfg. It fails for a URL that is not an absolute
// http(s) URL, a tenant with a slash, or both a key and a token.
func New(cfg Config) (*Client, error) {
	raw := cfg.URL
	if raw == "" {
		raw = DefaultURL
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("client: the URL %q is not an absolute http(s) URL", raw)
	}
	if u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return nil, fmt.Errorf("client: the URL %q must have no query, fragment or user info", raw)
	}
	u.Path = strings.TrimRight(u.Path, "/")
	u.RawPath = ""
	if strings.ContainsAny(cfg.Tenant, "/?#") {
		return nil, fmt.Errorf("client: the tenant %q is not a tenant id", cfg.Tenant)
	}
	if cfg.Key != "" && cfg.Token != "" {
		return nil, errors.New("client: give an API key or a token, not both")
	}
	c := &Client{base: u, cfg: cfg, hc: cfg.HTTPClient, source: cfg.Source}
	if c.hc == nil {
		c.hc = http.DefaultClient
	}
	if c.source == "" {
		c.source = DefaultSource
	}
	return c, nil
}

// URL returns the absolute URL of the resource path (which starts with a
// slash), under the tenant in multi-tenant mode.
func (c *Client) URL(path string) string {
	u := *c.base
	prefix := u.Path
	if c.cfg.Tenant != "" {
		prefix += "/" + url.PathEscape(c.cfg.Tenant)
	}
	u.Path = prefix + path
	return u.String()
}

// Error is a refusal by agentbus: the error body of the API,
// {"error":{"code","message","details"}}, and the HTTP status it came
// with. Code is one of the API's error codes (VALIDATION_FAILED,
// AGENT_NOT_FOUND, ...), or, for an answer that carried no error body,
// HTTP_<status>.
type Error struct {
	Status  int
	Code    string
	Message string
	// Details is the error's details object as sent ({} when none).
	Details json.RawMessage
}

// Error returns "CODE: message".
func (e *Error) Error() string { return e.Code + ": " + e.Message }

// busy reports whether err is agentbus saying to ask again later (429
// RATE_LIMITED, 503): what a caller that keeps asking waits out.
func busy(err error) bool {
	var e *Error
	return errors.As(err, &e) && (e.Status == http.StatusTooManyRequests || e.Status == http.StatusServiceUnavailable)
}

// retryAfter is how long a busy answer asks a caller to wait before it
// asks again (its details' retryAfterSeconds), or 0 when it says nothing.
func retryAfter(err error) time.Duration {
	var e *Error
	if !errors.As(err, &e) {
		return 0
	}
	var d struct {
		RetryAfterSeconds float64 `json:"retryAfterSeconds"`
	}
	if json.Unmarshal(e.Details, &d) != nil || d.RetryAfterSeconds <= 0 {
		return 0
	}
	return time.Duration(min(d.RetryAfterSeconds, 60) * float64(time.Second))
}

// Violation is one broken rule of a VALIDATION_FAILED refusal: where
// (a JSON path) and what.
type Violation struct {
	Path    string `json:"path"`
	Message string `json:"message"`
}

// Violations returns the violations the error's details list, if any.
func (e *Error) Violations() []Violation {
	var d struct {
		Violations []Violation `json:"violations"`
	}
	_ = json.Unmarshal(e.Details, &d)
	return d.Violations
}

// IsCode reports whether err is an *Error with the given code.
func IsCode(err error, code string) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == code
}

// maxBody bounds the answers read whole (pages, records, traces).
const maxBody = 64 << 20

// request builds a request of method to path (under the tenant) with
// query and a JSON body (none when nil), carrying the credential.
func (c *Client) request(ctx context.Context, method, path string, query url.Values, body []byte) (*http.Request, error) {
	target := c.URL(path)
	if len(query) > 0 {
		target += "?" + query.Encode()
	}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, target, rd)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	switch {
	case c.cfg.Token != "":
		req.Header.Set("Authorization", "Bearer "+c.cfg.Token)
	case c.cfg.Key != "":
		req.Header.Set("Authorization", "Bearer "+c.cfg.Key)
		req.Header.Set("X-API-Key", c.cfg.Key)
	}
	return req, nil
}

// answer is a successful response read whole.
type answer struct {
	status int
	header http.Header
	body   []byte
}

// do sends a request and reads its answer. A status of 400 or more is
// returned as an *Error.
func (c *Client) do(ctx context.Context, method, path string, query url.Values, body []byte) (*answer, error) {
	req, err := c.request(ctx, method, path, query, body)
	if err != nil {
		return nil, err
	}
	res, err := c.hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	data, err := io.ReadAll(io.LimitReader(res.Body, maxBody))
	if err != nil {
		return nil, fmt.Errorf("client: reading the answer of %s %s: %w", method, path, err)
	}
	if res.StatusCode >= 400 {
		return nil, apiError(res.StatusCode, data)
	}
	return &answer{status: res.StatusCode, header: res.Header, body: data}, nil
}

// getJSON sends a GET and decodes its answer into out.
func (c *Client) getJSON(ctx context.Context, path string, query url.Values, out any) error {
	a, err := c.do(ctx, http.MethodGet, path, query, nil)
	if err != nil {
		return err
	}
	return decode(a.body, out)
}

func decode(body []byte, out any) error {
	if err := json.Unmarshal(body, out); err != nil {
		return fmt.Errorf("client: the answer is not the JSON expected: %w", err)
	}
	return nil
}

// apiError returns the *Error of an answer with status and body.
func apiError(status int, body []byte) *Error {
	var eb struct {
		Error *struct {
			Code    string          `json:"code"`
			Message string          `json:"message"`
			Details json.RawMessage `json:"details"`
		} `json:"error"`
	}
	if json.Unmarshal(body, &eb) == nil && eb.Error != nil && eb.Error.Code != "" {
		d := eb.Error.Details
		if len(d) == 0 || string(d) == "null" {
			d = json.RawMessage("{}")
		}
		return &Error{Status: status, Code: eb.Error.Code, Message: eb.Error.Message, Details: d}
	}
	msg := strings.TrimSpace(string(body))
	if len(msg) > 200 {
		msg = msg[:200] + "..."
	}
	if msg == "" {
		msg = http.StatusText(status)
	}
	return &Error{Status: status, Code: fmt.Sprintf("HTTP_%d", status), Message: msg, Details: json.RawMessage("{}")}
}

// Page is what a list operation reads at a time: Limit items (the
// server's default when 0) after the cursor After ("" for the start).
type Page struct {
	Limit int
	After string
}

func (p Page) query() url.Values {
	q := url.Values{}
	if p.Limit > 0 {
		q.Set("limit", fmt.Sprint(p.Limit))
	}
	if p.After != "" {
		q.Set("after", p.After)
	}
	return q
}

// sleep waits d, or returns ctx's error when ctx ends first.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
