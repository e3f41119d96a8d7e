package egress_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/egress"
)

// receiver is a loopback HTTP server counting the requests it gets.
type receiver struct {
	*httptest.Server
	hits atomic.Int64
}

func newReceiver(t *testing.T, h http.HandlerFunc) *receiver {
	t.Helper()
	r := &receiver{}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.hits.Add(1)
		if h != nil {
			h(w, req)
		}
	}))
	t.Cleanup(r.Close)
	return r
}

// port is the receiver's port.
func (r *receiver) port() string {
	u, _ := url.Parse(r.URL)
	return u.Port()
}

// rebinder answers a name with a public address the first time it is
// asked (when the URL is checked), and with loopback after (at delivery).
type rebinder struct {
	mu    sync.Mutex
	asked int
}

func (r *rebinder) LookupNetIP(context.Context, string, string) ([]netip.Addr, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.asked++
	if r.asked == 1 {
		return []netip.Addr{netip.MustParseAddr("93.184.215.14")}, nil
	}
	return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
}

// TestDNSRebinding: a name that resolves to a public address when the URL
// is checked and to loopback at delivery is refused at dial time, on the
// address actually dialled, and the loopback server gets nothing; with
// private targets allowed the same delivery goes through.
func TestDNSRebinding(t *testing.T) {
	t.Parallel()
	for _, allow := range []bool{false, true} {
		srv := newReceiver(t, nil)
		rules := egress.Rules{AllowPrivate: allow, Resolver: &rebinder{}}
		raw := "http://rebind.acme.test:" + srv.port() + "/hook"
		if _, err := rules.CheckURL(context.Background(), raw); err != nil {
			t.Fatalf("allowPrivate=%v: check: %v (the first answer is public)", allow, err)
		}
		resp, err := rules.Client(5*time.Second).Post(raw, "application/json", strings.NewReader("{}"))
		if !allow {
			if err == nil {
				resp.Body.Close()
				t.Fatalf("delivered to loopback after rebinding: %s", resp.Status)
			}
			if !errors.Is(err, egress.ErrRefused) || !strings.Contains(err.Error(), "loopback") {
				t.Errorf("error %q; want ErrRefused naming loopback", err)
			}
			if n := srv.hits.Load(); n != 0 {
				t.Errorf("the loopback server got %d requests", n)
			}
			continue
		}
		if err != nil {
			t.Fatalf("private targets allowed: %v", err)
		}
		resp.Body.Close()
		if n := srv.hits.Load(); n != 1 {
			t.Errorf("private targets allowed: the server got %d requests, want 1", n)
		}
	}
}

// TestClientChecksEveryDial: an address the rules refuse is refused at
// dial time even when no check ran before (a literal address, a name, a
// name among whose addresses only the refused ones answer), and the
// switch lets loopback through.
func TestClientChecksEveryDial(t *testing.T) {
	t.Parallel()
	srv := newReceiver(t, nil)
	resolver := &fakeResolver{answers: map[string][]string{"receiver.acme.test": {"127.0.0.1"}}}
	for _, raw := range []string{
		srv.URL,
		"http://receiver.acme.test:" + srv.port() + "/",
		"http://[::ffff:127.0.0.1]:" + srv.port() + "/",
		"http://0x7f.1:" + srv.port() + "/",
		"http://2130706433:" + srv.port() + "/",
	} {
		_, err := egress.Rules{Resolver: resolver}.Client(5 * time.Second).Get(raw)
		if !errors.Is(err, egress.ErrRefused) {
			t.Errorf("%s: %v; want ErrRefused", raw, err)
		}
	}
	if n := srv.hits.Load(); n != 0 {
		t.Fatalf("the loopback server got %d requests with private targets off", n)
	}
	resp, err := egress.Rules{AllowPrivate: true, Resolver: resolver}.Client(5 * time.Second).Get("http://receiver.acme.test:" + srv.port() + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if n := srv.hits.Load(); n != 1 {
		t.Errorf("the server got %d requests, want 1", n)
	}
}

// TestClientRefusesDocumentationNames: a name reserved for documentation
// is refused at dial time without a lookup, even where a resolver would
// answer it with an address that is allowed, private targets allowed or
// not.
func TestClientRefusesDocumentationNames(t *testing.T) {
	t.Parallel()
	srv := newReceiver(t, nil)
	for _, allow := range []bool{false, true} {
		resolver := &fakeResolver{answers: map[string][]string{"hooks.example.com": {"127.0.0.1"}, "hooks.example": {"127.0.0.1"}}}
		for _, raw := range []string{"http://hooks.example.com:" + srv.port() + "/agentbus", "http://hooks.example:" + srv.port() + "/"} {
			resp, err := egress.Rules{AllowPrivate: allow, Resolver: resolver}.Client(5 * time.Second).Get(raw)
			if err == nil {
				resp.Body.Close()
				t.Fatalf("allowPrivate=%v %s: answered %s", allow, raw, resp.Status)
			}
			var oerr *net.OpError
			if !errors.Is(err, egress.ErrRefused) || !errors.As(err, &oerr) || oerr.Op != "dial" || !strings.Contains(err.Error(), "reserved for documentation") {
				t.Errorf("allowPrivate=%v %s: %v; want a dial error wrapping ErrRefused, naming documentation", allow, raw, err)
			}
		}
		if len(resolver.asked) != 0 {
			t.Errorf("allowPrivate=%v: looked up %q; want no lookup", allow, resolver.asked)
		}
	}
	if n := srv.hits.Load(); n != 0 {
		t.Errorf("the receiver got %d requests", n)
	}
}

// TestDialTriesEachAddress: when a name has several addresses, one that
// does not answer leaves the next to be tried (nothing listens on
// 127.0.0.2 at the receiver's port).
func TestDialTriesEachAddress(t *testing.T) {
	t.Parallel()
	srv := newReceiver(t, nil)
	rules := egress.Rules{AllowPrivate: true, Resolver: &fakeResolver{answers: map[string][]string{"receiver.acme.test": {"127.0.0.2", "127.0.0.1"}}}}
	resp, err := rules.Client(5 * time.Second).Get("http://receiver.acme.test:" + srv.port() + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if n := srv.hits.Load(); n != 1 {
		t.Errorf("the server got %d requests, want 1", n)
	}
}

// TestRedirectNotFollowed: a 3xx comes back as the response, and the
// Location is never requested.
func TestRedirectNotFollowed(t *testing.T) {
	t.Parallel()
	target := newReceiver(t, nil)
	for _, code := range []int{301, 302, 303, 307, 308} {
		redirect := newReceiver(t, func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, target.URL+"/elsewhere", code)
		})
		resp, err := egress.Rules{AllowPrivate: true}.Client(5*time.Second).Post(redirect.URL, "application/json", strings.NewReader("{}"))
		if err != nil {
			t.Fatalf("%d: %v", code, err)
		}
		resp.Body.Close()
		if resp.StatusCode != code || resp.Header.Get("Location") != target.URL+"/elsewhere" {
			t.Errorf("%d: got %s (Location %q)", code, resp.Status, resp.Header.Get("Location"))
		}
	}
	if n := target.hits.Load(); n != 0 {
		t.Errorf("the redirect target got %d requests", n)
	}
}

// TestProxyIgnored: proxy variables in the environment are not used: the
// request goes to the receiver, none to the proxy. The receiver is reached
// by a name, since Go never proxies a loopback address anyway.
func TestProxyIgnored(t *testing.T) {
	proxy := newReceiver(t, nil)
	srv := newReceiver(t, nil)
	for _, v := range []string{"HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"} {
		t.Setenv(v, proxy.URL)
	}
	t.Setenv("NO_PROXY", "")
	t.Setenv("no_proxy", "")
	rules := egress.Rules{AllowPrivate: true, Resolver: &fakeResolver{answers: map[string][]string{"receiver.acme.test": {"127.0.0.1"}}}}
	resp, err := rules.Client(5 * time.Second).Get("http://receiver.acme.test:" + srv.port() + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if p, s := proxy.hits.Load(), srv.hits.Load(); p != 0 || s != 1 {
		t.Errorf("proxy got %d requests, receiver %d; want 0 and 1", p, s)
	}
}

// TestReadBody: a body is read up to the cap and no further, and says
// whether it was cut.
func TestReadBody(t *testing.T) {
	t.Parallel()
	const huge = 64 << 20
	var written atomic.Int64
	srv := newReceiver(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/small" {
			w.Write([]byte("ok"))
			return
		}
		chunk := []byte(strings.Repeat("x", 32<<10))
		for written.Load() < huge {
			n, err := w.Write(chunk)
			written.Add(int64(n))
			if err != nil {
				return
			}
		}
	})
	client := egress.Rules{AllowPrivate: true}.Client(10 * time.Second)
	for _, c := range []struct {
		path      string
		limit     int64
		want      int
		truncated bool
	}{
		{"/small", 1024, 2, false},
		{"/small", 2, 2, false},
		{"/small", 1, 1, true},
		{"/small", 0, 0, true},
		{"/huge", 64 << 10, 64 << 10, true},
	} {
		resp, err := client.Get(srv.URL + c.path)
		if err != nil {
			t.Fatal(err)
		}
		body, truncated, err := egress.ReadBody(resp, c.limit)
		if err != nil || len(body) != c.want || truncated != c.truncated {
			t.Errorf("%s up to %d: %d bytes, truncated %v, %v; want %d, %v", c.path, c.limit, len(body), truncated, err, c.want, c.truncated)
		}
	}
	if w := written.Load(); w >= huge {
		t.Errorf("the server wrote all %d bytes: the body was read past the cap", w)
	}
}

// TestClientTimeout: the timeout bounds a request whose answer does not
// come.
func TestClientTimeout(t *testing.T) {
	t.Parallel()
	srv := newReceiver(t, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-time.After(10 * time.Second):
		}
	})
	start := time.Now()
	_, err := egress.Rules{AllowPrivate: true}.Client(200 * time.Millisecond).Get(srv.URL)
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Errorf("%v; want a timeout", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("took %s with a 200ms timeout", d)
	}
}

// TestResponseHeaderCap: response headers past the cap fail the request
// instead of being held in memory.
func TestResponseHeaderCap(t *testing.T) {
	t.Parallel()
	srv := newReceiver(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Big", strings.Repeat("h", egress.MaxResponseHeaderBytes+1))
	})
	if resp, err := (egress.Rules{AllowPrivate: true}).Client(5 * time.Second).Get(srv.URL); err == nil {
		resp.Body.Close()
		t.Errorf("headers of %d bytes read", egress.MaxResponseHeaderBytes+1)
	}
}

// serverResolver fails every lookup as a real resolver does, naming the
// DNS server that answered.
type serverResolver struct{}

func (serverResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	return nil, &net.DNSError{Err: "no such host", Name: host, Server: "10.9.8.7:53", IsNotFound: true}
}

// TestLookupErrorNamesNoServer: a name that does not resolve at delivery
// fails with the lookup's error, which names the host but not the DNS
// server of agentbus's network.
func TestLookupErrorNamesNoServer(t *testing.T) {
	t.Parallel()
	_, err := egress.Rules{Resolver: serverResolver{}}.Client(5 * time.Second).Get("http://gone.acme.test/")
	var dnsErr *net.DNSError
	if !errors.As(err, &dnsErr) || !dnsErr.IsNotFound || !strings.Contains(err.Error(), "gone.acme.test") {
		t.Fatalf("%v; want a not-found DNS error naming the host", err)
	}
	if strings.Contains(err.Error(), "10.9.8.7") {
		t.Errorf("%q names the DNS server", err)
	}
}
