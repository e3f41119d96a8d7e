package client

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Event is an event envelope as the log holds it. Raw is the envelope
// exactly as agentbus sent it (MarshalJSON writes it back unchanged).
type Event struct {
	Envelope
	// Cursor is the event's place in the log as a live stream names it
	// (its SSE id): an opaque string, resumed after with Last-Event-ID.
	// Pages of GET /events give one cursor per page (EventPage.Next), so
	// Events leaves it empty.
	Cursor string
	Raw    json.RawMessage
}

// UnmarshalJSON decodes an envelope and keeps it as Raw.
func (e *Event) UnmarshalJSON(b []byte) error {
	if err := json.Unmarshal(b, &e.Envelope); err != nil {
		return err
	}
	e.Raw = append(json.RawMessage(nil), b...)
	return nil
}

// MarshalJSON writes Raw, or the envelope when Raw is empty.
func (e Event) MarshalJSON() ([]byte, error) {
	if len(e.Raw) > 0 {
		return e.Raw, nil
	}
	return json.Marshal(e.Envelope)
}

// EventQuery selects events of the log.
type EventQuery struct {
	// Types keeps the events of these types (all when empty).
	Types []string
	// CorrelationID keeps the events one command caused.
	CorrelationID string
	// After is the cursor to start after ("" for the start of the log):
	// a page's Next, or the Cursor of a streamed event.
	After string
	// Limit bounds a page (the server's default when 0); Follow ignores
	// it.
	Limit int
}

func (q EventQuery) values() url.Values {
	v := url.Values{}
	for _, t := range q.Types {
		v.Add("type", t)
	}
	if q.CorrelationID != "" {
		v.Set("correlationId", q.CorrelationID)
	}
	if q.After != "" {
		v.Set("after", q.After)
	}
	if q.Limit > 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	return v
}

// EventPage is a page of the event log. Next is the cursor to read the
// next page after ("" when agentbus gave none).
type EventPage struct {
	Events []Event `json:"events"`
	Next   string  `json:"next,omitempty"`
}

// Events reads one page of the events q selects.
func (c *Client) Events(ctx context.Context, q EventQuery) (*EventPage, error) {
	var p EventPage
	if err := c.getJSON(ctx, "/events", q.values(), &p); err != nil {
		return nil, err
	}
	return &p, nil
}

// Follow streams the events q selects as the log grows (GET /events as
// Server-Sent Events): what is stored after q.After first, then each
// event as it is published, calling fn with each in order. A dropped
// connection is opened again after the delay the stream asked for (its
// retry field), with Last-Event-ID set to the last event's cursor, so no
// event is missed or repeated. It returns fn's error as soon as fn returns
// one, ctx's error when ctx ends, an error when a streamed event is not an
// envelope (reconnecting would read it again), and an *Error when agentbus
// refuses the stream (a bad query, a revoked credential); a refusal that is for now
// only (429 RATE_LIMITED, 503) is tried again. When the first connection
// cannot be made at all (agentbus is not there), its error is returned;
// once one has been made, the next ones are tried until ctx ends.
func (c *Client) Follow(ctx context.Context, q EventQuery, fn func(Event) error) error {
	q.Limit = 0
	if q.After == "" {
		q.After = startCursor // a live stream without after starts at the log's end
	}
	last := q.After
	retry := 2 * time.Second
	connected := false
	for first := true; ; first = false {
		if !first {
			if err := sleep(ctx, retry); err != nil {
				return err
			}
		}
		err := c.stream(ctx, q, last, &retry, &connected, func(e Event) error {
			last = e.Cursor
			return fn(e)
		})
		if !connected && err != nil && ctx.Err() == nil && !errors.As(err, new(*Error)) {
			return err
		}
		switch {
		case busy(err):
			if a := retryAfter(err); a > retry { // as long as agentbus asks, at least
				if err := sleep(ctx, a-retry); err != nil {
					return err
				}
			}
			continue
		case errors.As(err, new(*Error)):
			return err
		case errors.Is(err, errStop):
			return errors.Unwrap(err)
		case ctx.Err() != nil:
			return ctx.Err()
		}
		// the stream ended or broke: open it again from last
	}
}

// startCursor is the cursor of the log's start.
const startCursor = "0"

// errStop wraps an error that ends Follow (fn's, or an event that cannot
// be read), to tell it from a broken stream.
var errStop = errors.New("stopped")

type stopErr struct{ err error }

func (s stopErr) Error() string        { return s.err.Error() }
func (s stopErr) Is(target error) bool { return target == errStop }
func (s stopErr) Unwrap() error        { return s.err }

// stream reads one connection of a live stream, resuming after last with
// Last-Event-ID (q.After on the first connection, when last is q.After).
// It sets *connected once agentbus has answered.
func (c *Client) stream(ctx context.Context, q EventQuery, last string, retry *time.Duration, connected *bool, fn func(Event) error) error {
	v := q.values()
	resume := last != "" && last != q.After
	if resume {
		v.Del("after") // Last-Event-ID takes its place
	}
	req, err := c.request(ctx, http.MethodGet, "/events", v, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "text/event-stream")
	if resume {
		req.Header.Set("Last-Event-ID", last)
	}
	res, err := c.hc.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	*connected = true
	if res.StatusCode >= 400 {
		data, _ := io.ReadAll(io.LimitReader(res.Body, 1<<20))
		return apiError(res.StatusCode, data)
	}
	if ct := res.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		return &Error{Status: res.StatusCode, Code: "HTTP_" + strconv.Itoa(res.StatusCode),
			Message: fmt.Sprintf("expected an event stream, got %q", ct), Details: json.RawMessage("{}")}
	}
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 64<<10), maxBody)
	var id string
	var data strings.Builder
	for sc.Scan() {
		line := sc.Text()
		if line == "" { // the end of a message
			if data.Len() > 0 {
				var e Event
				if err := json.Unmarshal([]byte(data.String()), &e); err != nil {
					return stopErr{fmt.Errorf("client: the streamed event %q is not an envelope: %w", id, err)}
				}
				e.Cursor = id
				if err := fn(e); err != nil {
					return stopErr{err}
				}
			}
			data.Reset()
			continue
		}
		if strings.HasPrefix(line, ":") {
			continue // a comment: live, heartbeat, closed
		}
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch field {
		case "id":
			id = value
		case "data":
			if data.Len() > 0 {
				data.WriteByte('\n')
			}
			data.WriteString(value)
		case "retry":
			if ms, err := strconv.Atoi(value); err == nil && ms > 0 {
				*retry = time.Duration(ms) * time.Millisecond
			}
		}
	}
	return sc.Err()
}
