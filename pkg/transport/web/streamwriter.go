package web

import (
	"net/http"
	"time"
)

// StreamWriter is the http.ResponseWriter of an answer that streams for
// long (SSE, an MCP session's event stream, A2A and gRPC streams): each
// write and each flush must finish within Timeout, or the connection is
// closed, and no deadline is left between them — http.Server's
// WriteTimeout bounds a whole answer, which a stream outlives, and over
// HTTP/2 a deadline left in place resets a stream that is merely quiet.
// OnHeader, when set, sees the header once, as the answer starts.
type StreamWriter struct {
	http.ResponseWriter
	Timeout  time.Duration
	OnHeader func(http.Header)
	started  bool
}

func (w *StreamWriter) within(do func() error) error {
	rc := http.NewResponseController(w.ResponseWriter)
	_ = rc.SetWriteDeadline(time.Now().Add(w.Timeout))
	defer func() { _ = rc.SetWriteDeadline(time.Time{}) }()
	return do()
}

func (w *StreamWriter) start() {
	if !w.started {
		w.started = true
		if w.OnHeader != nil {
			w.OnHeader(w.Header())
		}
	}
}

// WriteHeader implements http.ResponseWriter.
func (w *StreamWriter) WriteHeader(code int) {
	w.start()
	w.ResponseWriter.WriteHeader(code)
}

// Write implements http.ResponseWriter, within Timeout.
func (w *StreamWriter) Write(b []byte) (n int, err error) {
	w.start()
	err = w.within(func() error {
		n, err = w.ResponseWriter.Write(b)
		return err
	})
	return n, err
}

// Flush sends what is buffered, within Timeout.
func (w *StreamWriter) Flush() { _ = w.FlushError() }

// FlushError is Flush reporting its error (http.ResponseController uses
// it).
func (w *StreamWriter) FlushError() error {
	w.start()
	return w.within(http.NewResponseController(w.ResponseWriter).Flush)
}

// Unwrap returns the writer underneath (http.ResponseController).
func (w *StreamWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
