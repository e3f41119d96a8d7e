package e2e_test

import (
	"context"
	"encoding/json"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/egress"
	"github.com/agentbus/agentbus/pkg/settings"
	"github.com/agentbus/agentbus/test/testkit"
)

// dnsDown is a resolver that cannot answer: DNS is unavailable.
type dnsDown struct {
	mu    sync.Mutex
	asked []string
}

func (d *dnsDown) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.asked = append(d.asked, host)
	return nil, &net.DNSError{Err: "server misbehaving", Name: host, IsTemporary: true}
}

// TestWebhookExamplesAcceptedOffline: every example of every command
// schema agentbus serves (the built-in catalogue and the example
// catalogue) that names a webhook URL is accepted as it stands: its URL
// passes the rules with DNS unavailable, without a lookup, and POST
// /commands takes the example with private targets not allowed. A
// subscription made from one is never delivered to: each attempt is
// refused, with no lookup and no connection, and says why.
func TestWebhookExamplesAcceptedOffline(t *testing.T) {
	t.Parallel()
	s := start(t, func(c *settings.Config) {
		c.Webhooks.RetrySchedule = []settings.Duration{settings.Duration(50 * time.Millisecond)}
	})
	down := &dnsDown{}
	n, standalone := 0, ""
	for _, e := range plCatalog(t, s, "/commands", "commands") {
		r := get(t, e.DataSchema)
		if r.Status != 200 {
			t.Fatalf("GET %s: %d", e.DataSchema, r.Status)
		}
		var doc struct {
			Examples []map[string]any `json:"examples"`
		}
		if err := json.Unmarshal(r.Body, &doc); err != nil {
			t.Fatalf("%s: %v", e.DataSchema, err)
		}
		for i, ex := range doc.Examples {
			w, _ := ex["webhook"].(map[string]any)
			raw, _ := w["url"].(string)
			if raw == "" {
				continue
			}
			n++
			if _, err := (egress.Rules{Resolver: down}).CheckURL(context.Background(), raw); err != nil {
				t.Errorf("%s/%s example %d: %s refused with DNS unavailable: %v", e.Schema, e.Version, i, raw, err)
			}
			r := postJSON(t, s.URL+"/commands", command(e.Type, e.Schema+"/"+e.Version, ex))
			if r.Status != 202 {
				t.Errorf("%s/%s example %d: %d %s", e.Schema, e.Version, i, r.Status, r.Body)
				continue
			}
			if _, ok := ex["serviceId"]; !ok && e.Type == "CreateSubscription" {
				standalone, _ = r.JSON(t)["id"].(string)
			}
		}
	}
	if n == 0 || standalone == "" {
		t.Fatalf("%d examples name a webhook URL, standalone subscription %q: want some, and one without a service", n, standalone)
	}
	if len(down.asked) != 0 {
		t.Errorf("looked up %q; want no lookup", down.asked)
	}

	testkit.Eventually(t, "the example's subscription", func() bool { return get(t, s.URL+"/subscriptions/"+standalone).Status == 200 })
	corr := submitCommand(t, s.URL, placeOrder("o-example"))
	type record struct {
		CorrelationID string `json:"correlationId"`
		Status        string `json:"status"`
		Attempts      []struct {
			StatusCode int    `json:"statusCode"`
			Error      string `json:"error"`
		} `json:"attempts"`
	}
	var rec record
	testkit.Eventually(t, "the example subscription's record of the order", func() bool {
		var list struct {
			Deliveries []record `json:"deliveries"`
		}
		_ = json.Unmarshal(get(t, s.URL+"/subscriptions/"+standalone+"/deliveries").Body, &list)
		for _, d := range list.Deliveries {
			if d.CorrelationID == corr && d.Status == "failed" {
				rec = d
				return true
			}
		}
		return false
	})
	for i, a := range rec.Attempts {
		if a.StatusCode != 0 || !strings.Contains(a.Error, "reserved for documentation") {
			t.Errorf("attempt %d: %d %q; want refused as a documentation name", i+1, a.StatusCode, a.Error)
		}
	}
}
