package natsjs_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/errs"
	"github.com/agentbus/agentbus/pkg/natsjs"
	"github.com/agentbus/agentbus/streams"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
)

// securedServer starts an embedded server as agentbus does with HTTP
// authentication on, listening on a free loopback port, with agentbus's
// streams and buckets applied and users configured. It returns the
// connection agentbus itself would use.
func securedServer(t *testing.T, users ...natsjs.User) *natsjs.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := natsjs.Connect(ctx, natsjs.Config{
		DataDir: t.TempDir(), Listen: "127.0.0.1:-1", RequireAuth: true, Users: users,
	}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	specs, err := natsjs.LoadSpecs(streams.Files, natsjs.Settings{
		Prefix: "agentbus", DuplicateWindow: 2 * time.Minute,
	})
	if err != nil {
		t.Fatal(err)
	}
	var stores []natsjs.Spec
	for _, sp := range specs {
		if sp.Kind != "consumer" {
			stores = append(stores, sp)
		}
	}
	if err := conn.Apply(ctx, stores, nil); err != nil {
		t.Fatal(err)
	}
	return conn
}

// client is a NATS client on the embedded server's client port that
// records the permission violations the server reports.
type client struct {
	t  *testing.T
	nc *nats.Conn
	js jetstream.JetStream

	mu         sync.Mutex
	violations []string
}

// dial connects to url with opts, or fails t.
func dial(t *testing.T, url string, opts ...nats.Option) *client {
	t.Helper()
	c := &client{t: t}
	opts = append(opts, nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		c.mu.Lock()
		c.violations = append(c.violations, err.Error())
		c.mu.Unlock()
	}))
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(nc.Close)
	c.nc = nc
	if c.js, err = jetstream.New(nc); err != nil {
		t.Fatal(err)
	}
	return c
}

// deniedPublish runs do, which publishes (or requests) on subject, and
// fails t unless the server reports a publish permission violation for
// exactly that subject.
func (c *client) deniedPublish(what, subject string, do func(ctx context.Context) error) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 250*time.Millisecond)
	defer cancel()
	if err := do(ctx); err == nil {
		c.t.Errorf("%s: succeeded", what)
	}
	want := `permissions violation for publish to "` + strings.ToLower(subject) + `"`
	deadline := time.Now().Add(2 * time.Second)
	for {
		c.mu.Lock()
		for _, v := range c.violations {
			if strings.Contains(strings.ToLower(v), want) {
				c.mu.Unlock()
				return
			}
		}
		seen := strings.Join(c.violations, "\n")
		c.mu.Unlock()
		if time.Now().After(deadline) {
			c.t.Errorf("%s: no publish violation for %s; violations:\n%s", what, subject, seen)
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// deniedSubscribe fails t unless a subscription to subject is refused.
func (c *client) deniedSubscribe(subject string) {
	c.t.Helper()
	sub, err := c.nc.SubscribeSync(subject)
	if err != nil {
		return
	}
	// The server answers a refused subscription asynchronously.
	deadline := time.Now().Add(2 * time.Second)
	for {
		c.mu.Lock()
		for _, v := range c.violations {
			if strings.Contains(strings.ToLower(v), `permissions violation for subscription to "`+strings.ToLower(subject)+`"`) {
				c.mu.Unlock()
				_ = sub.Unsubscribe()
				return
			}
		}
		c.mu.Unlock()
		if time.Now().After(deadline) {
			c.t.Errorf("subscription to %s: not refused", subject)
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func mustPublish(t *testing.T, js jetstream.JetStream, subject string) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ack, err := js.Publish(ctx, subject, []byte(`{}`))
	if err != nil {
		t.Fatalf("publish %s: %v", subject, err)
	}
	return ack.Sequence
}

// TestEmbeddedRefusesClientsWithoutCredentials: with credentials required,
// a client with none, a wrong password or agentbus's own user name is
// refused on the client port, while agentbus's in-process connection works.
func TestEmbeddedRefusesClientsWithoutCredentials(t *testing.T) {
	t.Parallel()
	conn := securedServer(t, natsjs.User{Name: "svc-a", Password: "svc-a-password-0123456789", Tenants: []string{"a"}, Events: natsjs.Access{Read: true}})
	url := conn.ClientURL()
	if url == "" {
		t.Fatal("the secured server does not listen")
	}
	for name, opts := range map[string][]nats.Option{
		"no credentials":     nil,
		"wrong password":     {nats.UserInfo("svc-a", "not-the-password-0123456789")},
		"agentbus's user":    {nats.UserInfo("agentbus", "")},
		"administrator name": {nats.UserInfo(natsjs.AdminUser, "guess")},
		"a token":            {nats.Token("svc-a-password-0123456789")},
	} {
		nc, err := nats.Connect(url, append(opts, nats.Timeout(5*time.Second))...)
		if err == nil {
			nc.Close()
			t.Errorf("%s: connected", name)
			continue
		}
		if !errors.Is(err, nats.ErrAuthorization) {
			t.Errorf("%s: %v, want an authorization violation", name, err)
		}
	}
	// agentbus's own connection is in-process and has every right.
	mustPublish(t, conn.JS, "agentbus.evt.a._._.Seen")
	if _, err := conn.KV(context.Background(), natsjs.KeysBucket("agentbus")); err != nil {
		t.Fatalf("agentbus's own connection: %v", err)
	}
}

// TestEmbeddedUserPermissions: a user configured for tenant a publishes a's
// commands and reads a's events through its own consumer, and is refused
// everything else: tenant b's subjects, the key bucket, stream deletion,
// other consumers, reads by sequence, other inboxes.
func TestEmbeddedUserPermissions(t *testing.T) {
	t.Parallel()
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, err := kp.PublicKey()
	if err != nil {
		t.Fatal(err)
	}
	pwFile := filepath.Join(t.TempDir(), "svc-a.password")
	if err := os.WriteFile(pwFile, []byte("svc-a-password-0123456789\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	conn := securedServer(t,
		natsjs.User{Name: "svc-a", PasswordFile: pwFile, Tenants: []string{"a"},
			Commands: natsjs.Access{Publish: true}, Events: natsjs.Access{Read: true}, Consumers: []string{"svc-a"}},
		natsjs.User{Name: "proc-b", NKey: pub, Tenants: []string{"b"},
			Commands: natsjs.Access{Read: true}, Events: natsjs.Access{Publish: true}, Consumers: []string{"proc-b"}},
	)
	url := conn.ClientURL()
	names := natsjs.NamesFor("agentbus")
	evA := mustPublish(t, conn.JS, "agentbus.evt.a.order.o1.OrderPlaced")
	mustPublish(t, conn.JS, "agentbus.evt.b.order.o2.OrderPlaced")

	a := dial(t, url, nats.UserInfo("svc-a", "svc-a-password-0123456789"), nats.CustomInboxPrefix("_INBOX.svc-a"))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	// Allowed: a's commands, a's events through its own consumer, and
	// the last event of one of a's subjects.
	mustPublish(t, a.js, "agentbus.cmd.a.PlaceOrder")
	cons, err := a.js.CreateOrUpdateConsumer(ctx, names.Events, jetstream.ConsumerConfig{
		Durable: "svc-a", FilterSubject: "agentbus.evt.a.>", AckPolicy: jetstream.AckExplicitPolicy,
	})
	if err != nil {
		t.Fatalf("own consumer on a's events: %v", err)
	}
	batch, err := cons.Fetch(10, jetstream.FetchMaxWait(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for m := range batch.Messages() {
		got = append(got, m.Subject())
		if err := m.DoubleAck(ctx); err != nil {
			t.Errorf("ack: %v", err)
		}
	}
	if len(got) != 1 || got[0] != "agentbus.evt.a.order.o1.OrderPlaced" {
		t.Fatalf("svc-a read %v, want a's one event", got)
	}
	if info, err := cons.Info(ctx); err != nil || info.AckFloor.Stream != evA {
		t.Fatalf("consumer info %v, %v: want the event acked", info, err)
	}
	last, err := a.nc.RequestWithContext(ctx, "$JS.API.DIRECT.GET."+names.Events+".agentbus.evt.a.order.o1.*", nil)
	if err != nil || last.Header.Get("Nats-Sequence") == "" {
		t.Fatalf("last event of a's aggregate: %v %v", last, err)
	}
	live, err := a.nc.SubscribeSync("agentbus.evt.a.>")
	if err != nil {
		t.Fatal(err)
	}
	defer live.Unsubscribe()

	// Refused: tenant b, events (no publish right), other filters and
	// consumers, reads that are not limited by subject, the key bucket,
	// stream and message deletion, other inboxes.
	publish := func(subject string) func(context.Context) error {
		return func(ctx context.Context) error { _, err := a.js.Publish(ctx, subject, []byte(`{}`)); return err }
	}
	request := func(subject, body string) func(context.Context) error {
		return func(ctx context.Context) error {
			_, err := a.nc.RequestWithContext(ctx, subject, []byte(body))
			return err
		}
	}
	createConsumer := func(name, filter string, filters ...string) func(context.Context) error {
		return func(ctx context.Context) error {
			_, err := a.js.CreateOrUpdateConsumer(ctx, names.Events, jetstream.ConsumerConfig{
				Durable: name, FilterSubject: filter, FilterSubjects: filters, AckPolicy: jetstream.AckExplicitPolicy,
			})
			return err
		}
	}
	a.deniedPublish("command for b", "agentbus.cmd.b.PlaceOrder", publish("agentbus.cmd.b.PlaceOrder"))
	a.deniedPublish("event for a", "agentbus.evt.a.order.o1.OrderShipped", publish("agentbus.evt.a.order.o1.OrderShipped"))
	a.deniedPublish("consumer on b's events", "$JS.API.CONSUMER.CREATE."+names.Events+".svc-a.agentbus.evt.b.>",
		createConsumer("svc-a", "agentbus.evt.b.>"))
	a.deniedPublish("consumer on every event", "$JS.API.CONSUMER.CREATE."+names.Events+".svc-a.agentbus.evt.>",
		createConsumer("svc-a", "agentbus.evt.>"))
	a.deniedPublish("consumer on every tenant", "$JS.API.CONSUMER.CREATE."+names.Events+".svc-a.agentbus.evt.*.>",
		createConsumer("svc-a", "agentbus.evt.*.>"))
	a.deniedPublish("consumer with two filters", "$JS.API.CONSUMER.CREATE."+names.Events+".svc-a",
		createConsumer("svc-a", "", "agentbus.evt.a.>", "agentbus.evt.b.>"))
	a.deniedPublish("agentbus's control consumer", "$JS.API.CONSUMER.CREATE."+names.Events+".control.agentbus.evt.a.>",
		createConsumer("control", "agentbus.evt.a.>"))
	a.deniedPublish("pull from agentbus's control consumer", "$JS.API.CONSUMER.MSG.NEXT."+names.Events+".control",
		request("$JS.API.CONSUMER.MSG.NEXT."+names.Events+".control", `{"batch":1}`))
	a.deniedPublish("b's consumer", "$JS.API.CONSUMER.CREATE."+names.Commands+".proc-b.agentbus.cmd.a.>",
		func(ctx context.Context) error {
			_, err := a.js.CreateOrUpdateConsumer(ctx, names.Commands, jetstream.ConsumerConfig{Durable: "proc-b", FilterSubject: "agentbus.cmd.a.>"})
			return err
		})
	a.deniedPublish("event by sequence", "$JS.API.DIRECT.GET."+names.Events, request("$JS.API.DIRECT.GET."+names.Events, `{"seq":2}`))
	a.deniedPublish("event by sequence via the leader", "$JS.API.STREAM.MSG.GET."+names.Events,
		request("$JS.API.STREAM.MSG.GET."+names.Events, `{"seq":2}`))
	a.deniedPublish("last event of b's aggregate", "$JS.API.DIRECT.GET."+names.Events+".agentbus.evt.b.order.o2.*",
		request("$JS.API.DIRECT.GET."+names.Events+".agentbus.evt.b.order.o2.*", ""))
	a.deniedPublish("stream info (subject counts)", "$JS.API.STREAM.INFO."+names.Events,
		request("$JS.API.STREAM.INFO."+names.Events, `{"subjects_filter":">"}`))
	keys := "KV_" + natsjs.KeysBucket("agentbus")
	a.deniedPublish("the key bucket", "$JS.API.STREAM.INFO."+keys, func(ctx context.Context) error {
		_, err := a.js.KeyValue(ctx, natsjs.KeysBucket("agentbus"))
		return err
	})
	a.deniedPublish("the token signing key", "$JS.API.DIRECT.GET."+keys+".$KV."+natsjs.KeysBucket("agentbus")+".signing.hs256",
		request("$JS.API.DIRECT.GET."+keys+".$KV."+natsjs.KeysBucket("agentbus")+".signing.hs256", ""))
	a.deniedPublish("a forged key record", "$KV."+natsjs.KeysBucket("agentbus")+".key.forged",
		publish("$KV."+natsjs.KeysBucket("agentbus")+".key.forged"))
	a.deniedPublish("deleting the event stream", "$JS.API.STREAM.DELETE."+names.Events,
		func(ctx context.Context) error { return a.js.DeleteStream(ctx, names.Events) })
	a.deniedPublish("deleting the key bucket", "$JS.API.STREAM.DELETE."+keys,
		func(ctx context.Context) error { return a.js.DeleteKeyValue(ctx, natsjs.KeysBucket("agentbus")) })
	a.deniedPublish("purging the commands", "$JS.API.STREAM.PURGE."+names.Commands,
		request("$JS.API.STREAM.PURGE."+names.Commands, ""))
	a.deniedPublish("deleting an event", "$JS.API.STREAM.MSG.DELETE."+names.Events,
		request("$JS.API.STREAM.MSG.DELETE."+names.Events, `{"seq":1}`))
	a.deniedPublish("the max-deliveries advisory", "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES."+names.Commands+".x",
		publish("$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES."+names.Commands+".x"))
	a.deniedSubscribe("_INBOX.>")
	a.deniedSubscribe("_INBOX.proc-b.>")
	a.deniedSubscribe("agentbus.evt.b.>")
	a.deniedSubscribe("agentbus.evt.>")
	a.deniedSubscribe("$KV.>")

	// Nothing refused happened.
	ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := conn.JS.Stream(ctx, names.Events)
	if err != nil {
		t.Fatalf("the event stream after the attempts: %v", err)
	}
	if n := st.CachedInfo().State.Msgs; n != 2 {
		t.Errorf("the event stream holds %d messages, want 2", n)
	}
	cmds, err := conn.JS.Stream(ctx, names.Commands)
	if err != nil {
		t.Fatal(err)
	}
	if n := cmds.CachedInfo().State.Msgs; n != 1 {
		t.Errorf("the command stream holds %d messages, want a's one", n)
	}
	if _, err := conn.JS.Consumer(ctx, names.Commands, "proc-b"); !errors.Is(err, jetstream.ErrConsumerNotFound) {
		t.Errorf("b's consumer: %v, want none created", err)
	}
	if _, err := conn.KV(ctx, natsjs.KeysBucket("agentbus")); err != nil {
		t.Errorf("the key bucket after the attempts: %v", err)
	}

	// The NKey user of tenant b processes b's commands: its consumer on
	// b's commands, and b's events.
	b := dial(t, url, nats.Nkey(pub, kp.Sign), nats.CustomInboxPrefix("_INBOX.proc-b"))
	mustPublish(t, conn.JS, "agentbus.cmd.b.ShipOrder")
	bc, err := b.js.CreateOrUpdateConsumer(ctx, names.Commands, jetstream.ConsumerConfig{
		Durable: "proc-b", FilterSubject: "agentbus.cmd.b.ShipOrder", AckPolicy: jetstream.AckExplicitPolicy,
	})
	if err != nil {
		t.Fatalf("b's consumer on its commands: %v", err)
	}
	m, err := bc.Next(jetstream.FetchMaxWait(2 * time.Second))
	if err != nil {
		t.Fatalf("b's command: %v", err)
	}
	mustPublish(t, b.js, "agentbus.evt.b.order.o2.OrderShipped")
	if err := m.DoubleAck(ctx); err != nil {
		t.Fatalf("ack b's command: %v", err)
	}
	b.deniedPublish("an event for a", "agentbus.evt.a.order.o1.OrderShipped", func(ctx context.Context) error {
		_, err := b.js.Publish(ctx, "agentbus.evt.a.order.o1.OrderShipped", []byte(`{}`))
		return err
	})
	// svc-a saw a's events live, never b's.
	if msg, err := live.NextMsg(200 * time.Millisecond); err == nil {
		t.Errorf("svc-a's live subscription got %s", msg.Subject)
	}
}

// TestEmbeddedAdminFile: with credentials required, a listening embedded
// server writes the administrator's credential, readable by its owner
// only, for the admin commands; it has every right on the client port and
// is removed when the server stops. A server without a client port has
// none.
func TestEmbeddedAdminFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	conn, err := natsjs.Connect(ctx, natsjs.Config{DataDir: dir, Listen: "127.0.0.1:-1", RequireAuth: true}, log)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, natsjs.AdminFile)
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("%s: mode %v, want 0600", path, st.Mode().Perm())
	}
	admin, ok, err := natsjs.AdminAccess(dir)
	if err != nil || !ok || admin.URL != conn.ClientURL() {
		t.Fatalf("AdminAccess: %+v %v %v", admin, ok, err)
	}
	admin.Name = "test-admin"
	ac, err := natsjs.Connect(ctx, admin, log)
	if err != nil {
		t.Fatalf("admin connection: %v", err)
	}
	if _, err := ac.JS.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "ADMIN_CAN"}); err != nil {
		t.Errorf("admin creates a bucket: %v", err)
	}
	ac.Close()
	conn.Close()
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s after stop: %v, want removed", path, err)
	}
	if _, ok, err := natsjs.AdminAccess(dir); ok || err != nil {
		t.Errorf("AdminAccess after stop: %v %v", ok, err)
	}

	// In-process only: nothing to write.
	conn, err = natsjs.Connect(ctx, natsjs.Config{DataDir: dir, RequireAuth: true}, log)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s without a client port: %v, want none", path, err)
	}
}

// TestEmbeddedUserOfEveryTenantRunsAProcessor: a user of every tenant
// ("*") that reads commands and publishes events can do, through natsjs
// with its user name and password, what pkg/processor does: open the
// event log, declare its consumer with several filters, consume and ack,
// append on an aggregate with an expectation and read the aggregate's
// last event through the stream leader. Its replies come to _INBOX.<user>.
func TestEmbeddedUserOfEveryTenantRunsAProcessor(t *testing.T) {
	t.Parallel()
	conn := securedServer(t, natsjs.User{Name: "shipping", Password: "shipping-password-0123", Tenants: []string{"*"},
		Commands: natsjs.Access{Read: true}, Events: natsjs.Access{Publish: true, Read: true}, Consumers: []string{"shipping"}})
	names := natsjs.NamesFor("agentbus")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	p, err := natsjs.Connect(ctx, natsjs.Config{URL: conn.ClientURL(), User: "shipping", Password: "shipping-password-0123"}, log)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if got := p.NC.Opts.InboxPrefix; got != "_INBOX.shipping" {
		t.Errorf("inbox prefix %q, want _INBOX.shipping", got)
	}
	events, err := p.Log(ctx, names.Events)
	if err != nil {
		t.Fatalf("the event log: %v", err)
	}
	if err := p.EnsureConsumer(ctx, names.Commands, "shipping", []string{"agentbus.cmd.*.ShipOrder", "agentbus.cmd.*.CancelShipment"}, 30*time.Second, 20); err != nil {
		t.Fatalf("the consumer: %v", err)
	}
	mustPublish(t, conn.JS, "agentbus.cmd.a.ShipOrder")
	mustPublish(t, conn.JS, "agentbus.cmd.b.ShipOrder")
	handled := make(chan string, 2)
	cctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- p.Consume(cctx, names.Commands, "shipping", natsjs.ConsumeOptions{}, func(ctx context.Context, d bus.Delivery) {
			tenant := strings.Split(d.Message().Subject, ".")[2]
			agg := "agentbus.evt." + tenant + ".shipment.s1."
			last, err := events.Last(ctx, agg+"*")
			if err != nil && !errors.Is(err, errs.ErrNotFound) {
				t.Errorf("last event of %s: %v", agg, err)
			}
			var seq uint64
			if last != nil {
				seq = last.Seq
			}
			// Two events: one atomic batch.
			if _, err := events.Append(ctx, []*bus.Message{
				{Subject: agg + "OrderPacked", Header: bus.Header{}, Data: []byte(`{}`)},
				{Subject: agg + "OrderShipped", Header: bus.Header{}, Data: []byte(`{}`)},
			}, &bus.Expect{Subject: agg + "*", LastSeq: seq}); err != nil {
				t.Errorf("append for %s: %v", tenant, err)
			}
			if err := d.Ack(ctx); err != nil {
				t.Errorf("ack: %v", err)
			}
			handled <- tenant
		})
	}()
	for range 2 {
		select {
		case <-handled:
		case <-ctx.Done():
			t.Fatal("the commands were not handled")
		}
	}
	stop()
	if err := <-done; err != nil {
		t.Errorf("consume: %v", err)
	}
	for _, tenant := range []string{"a", "b"} {
		if m, err := events.Last(ctx, "agentbus.evt."+tenant+".shipment.s1.*"); err != nil || !strings.HasSuffix(m.Subject, ".OrderShipped") {
			t.Errorf("tenant %s: the batch was not appended: %v %v", tenant, m, err)
		}
	}
	// Still not the key bucket.
	short, cancelShort := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancelShort()
	if _, err := p.KV(short, natsjs.KeysBucket("agentbus")); err == nil {
		t.Error("the user of every tenant opened the key bucket")
	}
}
