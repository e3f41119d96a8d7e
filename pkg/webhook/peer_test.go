package webhook_test

import (
	"bufio"
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/agentbus/agentbus/pkg/webhook"
	"github.com/agentbus/agentbus/pkg/webhook/record"
)

// secretBytes is what the peers below send that must reach no record.
const secretBytes = "NDSECRETSERVERID"

// talker is a loopback TCP server that is no web server: on each
// connection it writes greeting, reads what the client sends, then writes
// reply (if any) and closes.
func talker(t *testing.T, greeting, reply string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				if greeting != "" {
					c.Write([]byte(greeting))
				}
				r := bufio.NewReader(c)
				for { // the request's head
					line, err := r.ReadString('\n')
					if err != nil || line == "\r\n" {
						break
					}
				}
				if reply != "" {
					c.Write([]byte(reply))
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// TestDeliveryErrorQuotesNoPeer: a webhook URL at a service that is no
// web server (a NATS port's INFO banner, an answer whose status line or
// header is malformed, an https URL at a plain TCP banner) fails its
// attempts with an error in agentbus's words (as does a certificate no
// known authority signed): no byte the peer sent
// reaches the delivery record, the dead letter or the failing reason
// (each of which the tenant reads).
func TestDeliveryErrorQuotesNoPeer(t *testing.T) {
	t.Parallel()
	nats := `INFO {"server_id":"` + secretBytes + `","version":"2.12.0","proto":1,"host":"0.0.0.0","port":4222}` + "\r\n"
	peer := func(scheme, greeting, reply string) func(*testing.T) string {
		return func(t *testing.T) string { return scheme + "://" + talker(t, greeting, reply) + "/hook" }
	}
	cases := []struct {
		name   string
		target func(*testing.T) string
		want   string
	}{
		{"nats banner", peer("http", nats, "-ERR 'Unknown Protocol Operation'\r\n"), "the target did not answer with valid HTTP"},
		{"malformed status line", peer("http", "", "HTTP/1.1 "+secretBytes+"\r\n\r\n"), "the target did not answer with valid HTTP"},
		{"malformed header", peer("http", "", "HTTP/1.1 200 OK\r\n"+secretBytes+"\r\n\r\n"), "the target did not answer with valid HTTP"},
		{"banner over https", peer("https", nats, ""), "the target did not answer with TLS"},
		{"plain HTTP to an https URL", func(t *testing.T) string {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				w.Write([]byte(secretBytes))
			}))
			t.Cleanup(srv.Close)
			return "https://" + srv.Listener.Addr().String() + "/hook"
		}, "the target answered https with plain HTTP"},
		{"certificate of no known authority", func(t *testing.T) string {
			srv := httptest.NewTLSServer(http.NotFoundHandler())
			t.Cleanup(srv.Close)
			return srv.URL + "/hook"
		}, "TLS: the certificate is signed by an unknown authority"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			e.subs.set(webhook.Subscription{Tenant: "default", ID: "peer", URL: c.target(t), Active: true})
			e.dispatcher(webhook.Config{Backoff: fast(1)})
			e.publish("default", "OrderPlaced", 1)
			var recs []record.Delivery
			eventually(t, "the dead letter's record", func() bool {
				var err error
				recs, err = e.recs.OfSubscription(context.Background(), "default", "peer")
				return err == nil && len(recs) == 1 && recs[0].Status == record.Failed
			})
			for i, a := range recs[0].Attempts {
				if a.Error != c.want || a.Response != "" || a.StatusCode != 0 {
					t.Errorf("attempt %d: status %d, error %q, response %q; want error %q and nothing else", i+1, a.StatusCode, a.Error, a.Response, c.want)
				}
			}
			dead, err := e.dead.Range(context.Background(), "agentbus.dlq.default.peer", 1, 10)
			if err != nil || len(dead) != 1 {
				t.Fatalf("dead letters: %d, %v", len(dead), err)
			}
			e.out.mu.Lock()
			failing := strings.Join(e.out.failing, "\n")
			e.out.mu.Unlock()
			for what, text := range map[string]string{
				"the dead letter's error": dead[0].Header.Get(webhook.HeaderError),
				"the failing reason":      failing,
			} {
				if !strings.Contains(text, c.want) || strings.Contains(text, secretBytes) || strings.Contains(text, "INFO") {
					t.Errorf("%s: %q; want %q and nothing the peer sent", what, text, c.want)
				}
			}
		})
	}
}
