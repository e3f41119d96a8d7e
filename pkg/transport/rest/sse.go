package rest

import (
	"bytes"
	"context"
	"encoding/json"
	"mime"
	"net/http"
	"strings"

	"github.com/agentbus/agentbus/pkg/errs"
	"github.com/agentbus/agentbus/pkg/ops"
	"github.com/agentbus/agentbus/pkg/transport/web"
	"github.com/labstack/echo/v4"
)

// EventStreamType is the media type of a live stream (Server-Sent Events).
const EventStreamType = "text/event-stream"

// wantsStream reports whether the request asks for a live stream: its
// Accept names text/event-stream (with no q=0).
func wantsStream(req *http.Request) bool {
	for _, part := range strings.Split(req.Header.Get("Accept"), ",") {
		mt, params, err := mime.ParseMediaType(strings.TrimSpace(part))
		if err == nil && mt == EventStreamType && params["q"] != "0" {
			return true
		}
	}
	return false
}

// streamBatchBytes is the most a stream holds back while more items
// follow at once, to send them in one write.
const streamBatchBytes = 32 << 10

// serveStream serves an operation live as Server-Sent Events: each item's
// cursor is its SSE id, a Last-Event-ID header takes the place of the
// "after" parameter (a reconnecting client resumes after the last event it
// got), a heartbeat is a comment. Items that come together are sent in
// one write. Errors before the first byte are answered
// as any error; after it, the stream ends with a comment saying why. Each
// write must finish within cfg.StreamWriteTimeout, so a reader that stops
// reading is closed rather than held.
func serveStream(c echo.Context, cfg Config, call *ops.Call, r *ops.Request) error {
	req := c.Request()
	if id := req.Header.Get("Last-Event-ID"); id != "" {
		r.Params[ops.ResumeAfter] = []string{id}
	}
	ctx, cancel := context.WithCancel(req.Context())
	defer cancel()
	defer context.AfterFunc(cfg.Stop, cancel)()
	w := &web.StreamWriter{ResponseWriter: c.Response(), Timeout: cfg.StreamWriteTimeout}
	started := false
	var buf bytes.Buffer
	write := func() error {
		if !started {
			h := w.Header()
			h.Set(echo.HeaderContentType, EventStreamType)
			h.Set("Cache-Control", "no-cache")
			h.Set("X-Accel-Buffering", "no") // a proxy must not hold events back
			w.WriteHeader(http.StatusOK)
			started = true
		}
		_, err := w.Write(buf.Bytes())
		buf.Reset()
		if err == nil {
			err = w.FlushError()
		}
		return err
	}
	err := call.Stream(ctx, r, func(it ops.StreamItem) error {
		if !started {
			buf.WriteString("retry: 2000\n: live\n\n")
		}
		if it.Data == nil {
			buf.WriteString(": heartbeat\n\n")
			return write()
		}
		data := it.Data
		if bytes.ContainsAny(data, "\r\n") {
			var one bytes.Buffer
			if json.Compact(&one, data) != nil {
				return nil // not JSON: never served (the reads leave it out)
			}
			data = one.Bytes()
		}
		buf.WriteString("id: ")
		buf.WriteString(it.Cursor)
		buf.WriteString("\ndata: ")
		buf.Write(data)
		buf.WriteString("\n\n")
		if it.More && buf.Len() < streamBatchBytes {
			return nil // sent with the next
		}
		return write()
	})
	if !started {
		if err != nil {
			return err
		}
		buf.WriteString(": live\n\n")
		if err := write(); err != nil {
			return nil
		}
	}
	switch {
	case cfg.Stop.Err() != nil: // whatever the stream was doing
		buf.WriteString(": closed: agentbus is shutting down; reconnect with Last-Event-ID\n\n")
		_ = write()
	case errs.CodeOf(err) == errs.CodeUnauthenticated:
		buf.WriteString(": closed: " + err.Error() + "\n\n")
		_ = write()
	}
	return nil
}
