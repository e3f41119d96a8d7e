package send

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/text"
	"github.com/agentbus/agentbus/pkg/tracing"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// Result is one attempt's outcome.
type Result struct {
	At         time.Time
	Status     int // 0: no answer
	Latency    time.Duration
	Err        string
	Response   string        // the first KiB of the answer
	RetryAfter time.Duration // the receiver's Retry-After (RetryAfter); 0: none
}

// Summary is the outcome in a few words: the error, else the status.
func (r Result) Summary() string {
	if r.Err != "" {
		return r.Err
	}
	return "status " + strconv.Itoa(r.Status)
}

// Keys gives the signing keys of a subscription, current key first (none:
// the delivery goes unsigned).
type Keys interface {
	Signing(ctx context.Context, tenant, id string) ([][]byte, error)
}

// Request is what one attempt sends: an event to a subscription's URL.
type Request struct {
	// Tenant and Subscription name the subscription, whose signing keys
	// are asked for.
	Tenant, Subscription string
	URL                  string
	// EventID is the webhook-id; EventType names the attempt's span.
	EventID, EventType string
	// Header is the event's header as stored, read for its trace context.
	Header bus.Header
	Body   []byte
}

// Sender makes single attempts of deliveries: signed, each bounded in
// time and in what it reads of the answer, at most maxInFlight at once.
// Safe for concurrent use.
type Sender struct {
	client      *http.Client
	keys        Keys
	sem         chan struct{}
	timeout     time.Duration
	maxResponse int64
	userAgent   string
	now         func() time.Time
}

// NewSender returns a Sender that sends through client, signs with the
// keys keys gives, allows each attempt timeout and reads at most
// maxResponse bytes of an answer, and takes the time from now.
func NewSender(client *http.Client, keys Keys, maxInFlight int, timeout time.Duration, maxResponse int64, userAgent string, now func() time.Time) *Sender {
	return &Sender{client: client, keys: keys, sem: make(chan struct{}, maxInFlight), timeout: timeout,
		maxResponse: maxResponse, userAgent: userAgent, now: now}
}

// Attempt makes one attempt of delivering r. It never fails: what went
// wrong is in the result. An attempt the context ends before it is sent
// has no status and no error.
func (a *Sender) Attempt(ctx context.Context, r Request) Result {
	res := Result{At: a.now()}
	keys, err := a.keys.Signing(ctx, r.Tenant, r.Subscription)
	if err != nil {
		res.Err = "no signing key: " + err.Error()
		return res
	}
	select {
	case a.sem <- struct{}{}:
		defer func() { <-a.sem }()
	case <-ctx.Done():
		return res
	}
	ctx, span := tracing.Start(tracing.Extract(ctx, r.Header), "webhook attempt", trace.SpanKindClient,
		attribute.String("agentbus.event.type", r.EventType))
	defer func() {
		if res.Status > 0 {
			span.SetAttributes(attribute.Int("http.response.status_code", res.Status))
		}
		if res.Err != "" || res.Status >= 300 {
			span.SetStatus(codes.Error, res.Summary())
		}
		span.End()
	}()
	actx, cancel := context.WithTimeout(ctx, a.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(actx, http.MethodPost, r.URL, bytes.NewReader(r.Body))
	if err != nil {
		res.Err = "request: " + err.Error()
		return res
	}
	at := a.now()
	// Set in canonical form as they are (Header.Set would canonicalise
	// each name for each delivery).
	req.Header["Content-Type"] = []string{"application/json"}
	req.Header["User-Agent"] = []string{a.userAgent}
	req.Header["Webhook-Id"] = []string{r.EventID}
	req.Header["Webhook-Timestamp"] = []string{strconv.FormatInt(at.Unix(), 10)}
	if len(keys) > 0 {
		req.Header["Webhook-Signature"] = []string{Signature(keys, r.EventID, at, r.Body)}
	}
	tracing.ToHTTP(ctx, req.Header)
	start := a.now()
	resp, err := a.client.Do(req)
	if err != nil {
		res.Latency, res.Err = a.now().Sub(start), describe(err)
		return res
	}
	// The status decides the attempt; the body is read only for the
	// record, up to the bound, and the rest is never read (closing the
	// body closes the connection).
	body, rerr := io.ReadAll(io.LimitReader(resp.Body, a.maxResponse))
	resp.Body.Close()
	res.Latency, res.Status = a.now().Sub(start), resp.StatusCode
	res.Response = string(truncate(body, 1024))
	res.RetryAfter = RetryAfter(resp.StatusCode, resp.Header, a.now())
	switch {
	case resp.StatusCode >= 300 && resp.StatusCode < 400:
		res.Err = "redirect to " + truncate(resp.Header.Get("Location"), 256) + " not followed"
	case rerr != nil:
		res.Err = "reading the answer: " + describe(rerr)
	}
	return res
}

// describe says why a request got no answer, or why its answer could not
// be read, in agentbus's own words. The subscriber reads it in the
// delivery's record, and a URL may point at a service that is no web
// server: nothing the peer sent is quoted (a banner, a malformed status
// line or header, a certificate's names), and neither is the URL (the
// record names it) nor the address dialled (a name the subscriber chose
// may resolve to an internal one). An error it does not know is the
// peer's answer not being valid HTTP.
func describe(err error) string {
	var (
		oerr      *net.OpError
		dnsErr    *net.DNSError
		hostErr   x509.HostnameError
		authErr   x509.UnknownAuthorityError
		certErr   x509.CertificateInvalidError
		verifyErr *tls.CertificateVerificationError
		recordErr tls.RecordHeaderError
	)
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return "timed out"
	case errors.Is(err, context.Canceled):
		return "cancelled"
	case errors.As(err, &hostErr):
		return "TLS: the certificate is not valid for the host"
	case errors.As(err, &authErr):
		return "TLS: the certificate is signed by an unknown authority"
	case errors.As(err, &certErr) && certErr.Reason == x509.Expired:
		return "TLS: the certificate has expired or is not valid yet"
	case errors.As(err, &certErr), errors.As(err, &verifyErr):
		return "TLS: the certificate is not valid"
	case errors.As(err, &recordErr):
		return "the target did not answer with TLS"
	case errors.Is(err, http.ErrSchemeMismatch):
		return "the target answered https with plain HTTP"
	case errors.As(err, &dnsErr):
		// Without the DNS server, which is this network's.
		return truncate("lookup "+dnsErr.Name+": "+dnsErr.Err, 512)
	case errors.As(err, &oerr) && oerr.Err != nil:
		// The operation and the system's (or the egress rules') reason,
		// without the addresses.
		return truncate(oerr.Op+": "+oerr.Err.Error(), 512)
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "the connection closed before a whole answer came"
	}
	return "the target did not answer with valid HTTP"
}

// truncate cuts s to at most n bytes, on a character boundary.
func truncate[T ~string | ~[]byte](s T, n int) T { return text.Cut(s, n) }
