package e2e_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/envelope"
	"github.com/agentbus/agentbus/pkg/natsjs"
	"github.com/agentbus/agentbus/pkg/settings"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// natsService is an internal service on agentbus's embedded NATS port,
// recording the permission violations the server reports to it.
type natsService struct {
	nc *nats.Conn
	js jetstream.JetStream

	mu         sync.Mutex
	violations []string
}

func connectService(t *testing.T, url, user, password string) *natsService {
	t.Helper()
	s := &natsService{}
	nc, err := nats.Connect(url, nats.UserInfo(user, password), nats.CustomInboxPrefix("_INBOX."+user),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			s.mu.Lock()
			s.violations = append(s.violations, strings.ToLower(err.Error()))
			s.mu.Unlock()
		}))
	if err != nil {
		t.Fatalf("%s connects: %v", user, err)
	}
	t.Cleanup(nc.Close)
	s.nc = nc
	if s.js, err = jetstream.New(nc); err != nil {
		t.Fatal(err)
	}
	return s
}

// refused fails t unless the server reported a publish violation on
// subject within a second.
func (s *natsService) refused(t *testing.T, what, subject string) {
	t.Helper()
	want := `permissions violation for publish to "` + strings.ToLower(subject) + `"`
	for deadline := time.Now().Add(time.Second); ; time.Sleep(10 * time.Millisecond) {
		s.mu.Lock()
		seen := strings.Join(s.violations, "\n")
		s.mu.Unlock()
		if strings.Contains(seen, want) {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("%s: no permission violation on %s; seen:\n%s", what, subject, seen)
			return
		}
	}
}

// publishCommand publishes env as tenant's command straight to NATS, as
// the subject contract says, and returns its correlation id.
func (s *natsService) publishCommand(ctx context.Context, tenant string, env map[string]any) (string, error) {
	corr := envelope.CorrelationID(tenant, env["source"].(string), env["id"].(string))
	body, err := json.Marshal(env)
	if err != nil {
		return "", err
	}
	m := nats.NewMsg("agentbus.cmd." + tenant + "." + env["type"].(string))
	m.Header.Set("Nats-Msg-Id", corr)
	m.Header.Set("Agentbus-Correlation-Id", corr)
	m.Data = body
	_, err = s.js.PublishMsg(ctx, m)
	return corr, err
}

// TestAuthenticationClosesTheEmbeddedNATSPort: with any HTTP
// authentication method and no NATS users, the embedded NATS port refuses
// every client without credentials (and with --auth none it stays open on
// loopback, as before), while agentbus itself works.
func TestAuthenticationClosesTheEmbeddedNATSPort(t *testing.T) {
	t.Parallel()
	for _, typ := range append([]string{"none"}, authTypes...) {
		t.Run(typ, func(t *testing.T) {
			t.Parallel()
			s := auStart(t, typ, func(c *settings.Config) {
				port := "127.0.0.1:-1"
				c.NATS.Listen = &port
			})
			nc, err := nats.Connect(s.Conn.ClientURL())
			if nc != nil {
				defer nc.Close()
			}
			switch {
			case typ == "none" && err != nil:
				t.Fatalf("--auth none: %v, want the loopback port open", err)
			case typ != "none" && !errors.Is(err, nats.ErrAuthorization):
				t.Fatalf("--auth %s: a client without credentials: %v, want an authorization violation", typ, err)
			}
			cred := ""
			if typ != "none" {
				cred = auBootstrap
			}
			r := auCall(t, typ, "POST", s.URL+"/commands", cred, plJSON(t, placeOrder("o-closed-port")))
			auExpect(t, "POST /commands", r, 202, "")
			corr, _ := r.JSON(t)["id"].(string)
			for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
				if evs := auEvents(t, auCall(t, typ, "GET", s.URL+"/events?correlationId="+corr, cred, nil)); len(evs) == 1 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("the command was not processed")
				}
			}
		})
	}
}

// TestInternalServicesOnTheEmbeddedNATS: with HTTP authentication on,
// agentbus's embedded NATS port refuses a client without credentials, and
// each configured internal service gets exactly its tenant's part of the
// subject contract: tenant a's service submits a command straight to NATS,
// agentbus processes it (visible over HTTP), and the service reads the
// resulting event through its own consumer, never tenant b's; it cannot
// submit b's commands, read the key bucket or delete a stream.
func TestInternalServicesOnTheEmbeddedNATS(t *testing.T) {
	t.Parallel()
	s := auStart(t, "bearer", auMulti("a", "b"), func(c *settings.Config) {
		port := "127.0.0.1:-1"
		c.NATS.Listen = &port
		c.NATS.Embedded.Users = []settings.NATSUser{
			{User: "svc-a", Password: "svc-a-password-0123", Tenants: []string{"a"}, Consumers: []string{"svc-a"}},
			{User: "svc-b", Password: "svc-b-password-0123", Tenants: []string{"b"}},
		}
	})
	url := s.Conn.ClientURL()
	if url == "" {
		t.Fatal("the embedded server does not listen")
	}
	if nc, err := nats.Connect(url); !errors.Is(err, nats.ErrAuthorization) {
		if nc != nil {
			nc.Close()
		}
		t.Fatalf("a client without credentials: %v, want an authorization violation", err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	a := connectService(t, url, "svc-a", "svc-a-password-0123")
	b := connectService(t, url, "svc-b", "svc-b-password-0123")
	corrA, err := a.publishCommand(ctx, "a", placeOrder("o-nats-a"))
	if err != nil {
		t.Fatalf("svc-a submits a's command: %v", err)
	}
	corrB, err := b.publishCommand(ctx, "b", placeOrder("o-nats-b"))
	if err != nil {
		t.Fatalf("svc-b submits b's command: %v", err)
	}

	// agentbus processed both: the events are there over HTTP.
	for tenant, corr := range map[string]string{"a": corrA, "b": corrB} {
		deadline := time.Now().Add(10 * time.Second)
		for {
			evs := auEvents(t, auCall(t, "bearer", "GET", s.URL+"/"+tenant+"/events?correlationId="+corr, auBootstrap, nil))
			if len(evs) == 1 && evs[0]["type"] == "OrderPlaced" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("tenant %s: events of the command published on NATS: %v", tenant, evs)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}

	// svc-a reads a's events through its own consumer: a's OrderPlaced only.
	cons, err := a.js.CreateOrUpdateConsumer(ctx, "AGENTBUS_EVENTS", jetstream.ConsumerConfig{
		Durable: "svc-a", FilterSubject: "agentbus.evt.a.>", AckPolicy: jetstream.AckExplicitPolicy,
	})
	if err != nil {
		t.Fatalf("svc-a's consumer on a's events: %v", err)
	}
	batch, err := cons.Fetch(100, jetstream.FetchMaxWait(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for m := range batch.Messages() {
		got = append(got, m.Headers().Get("Agentbus-Correlation-Id"))
		if !strings.HasPrefix(m.Subject(), "agentbus.evt.a.") {
			t.Errorf("svc-a read %s", m.Subject())
		}
		if err := m.Ack(); err != nil {
			t.Error(err)
		}
	}
	if len(got) != 1 || got[0] != corrA {
		t.Fatalf("svc-a read events of %v, want a's command %s only", got, corrA)
	}

	// Refused: b's commands, b's events, the key bucket, stream deletion.
	short := func() context.Context {
		c, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		t.Cleanup(cancel)
		return c
	}
	if _, err := a.publishCommand(short(), "b", placeOrder("o-nats-forged")); err == nil {
		t.Error("svc-a submitted a command of tenant b")
	}
	a.refused(t, "a command of b", "agentbus.cmd.b.PlaceOrder")
	if _, err := a.js.CreateOrUpdateConsumer(short(), "AGENTBUS_EVENTS", jetstream.ConsumerConfig{Durable: "svc-a", FilterSubject: "agentbus.evt.b.>"}); err == nil {
		t.Error("svc-a turned its consumer to b's events")
	}
	a.refused(t, "b's events", "$JS.API.CONSUMER.CREATE.AGENTBUS_EVENTS.svc-a.agentbus.evt.b.>")
	if _, err := a.js.KeyValue(short(), natsjs.KeysBucket("agentbus")); err == nil {
		t.Error("svc-a opened the key bucket")
	}
	a.refused(t, "the key bucket", "$JS.API.STREAM.INFO.KV_"+natsjs.KeysBucket("agentbus"))
	if err := a.js.DeleteStream(short(), "AGENTBUS_EVENTS"); err == nil {
		t.Error("svc-a deleted the event stream")
	}
	a.refused(t, "deleting the event stream", "$JS.API.STREAM.DELETE.AGENTBUS_EVENTS")
	// svc-b has no consumer of its own to create.
	if _, err := b.js.CreateOrUpdateConsumer(short(), "AGENTBUS_EVENTS", jetstream.ConsumerConfig{Durable: "svc-b", FilterSubject: "agentbus.evt.b.>"}); err == nil {
		t.Error("svc-b created a consumer it was not given")
	}
	b.refused(t, "an unlisted consumer", "$JS.API.CONSUMER.CREATE.AGENTBUS_EVENTS.svc-b.agentbus.evt.b.>")

	// agentbus itself works on: b's command went nowhere, and a fresh
	// command over HTTP is processed.
	if evs := auEvents(t, auCall(t, "bearer", "GET", s.URL+"/b/events?type=OrderPlaced", auBootstrap, nil)); len(evs) != 1 {
		t.Errorf("tenant b's orders: %d, want only its own", len(evs))
	}
	corr := submitCommandAs(t, s.URL+"/a", placeOrder("o-http-a"))
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if evs := auEvents(t, auCall(t, "bearer", "GET", s.URL+"/a/events?correlationId="+corr, auBootstrap, nil)); len(evs) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a command over HTTP was not processed")
		}
	}
}

// submitCommandAs submits env over HTTP with the bootstrap key and returns
// its correlation id.
func submitCommandAs(t *testing.T, base string, env map[string]any) string {
	t.Helper()
	r := auCall(t, "bearer", "POST", base+"/commands", auBootstrap, plJSON(t, env))
	auExpect(t, "POST /commands", r, 202, "")
	id, _ := r.JSON(t)["id"].(string)
	return id
}
