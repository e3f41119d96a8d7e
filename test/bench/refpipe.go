package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/envelope"
	"github.com/labstack/echo/v4"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// refPipe is the bare reference of the whole command -> event pipeline:
// the parts the design prescribes, wired the plain way with nats.go's
// jetstream API and nothing of agentbus's own. POST /commands (Echo)
// validates data against the same place-order/1.0 schema (compiled once),
// reads the command's receipt (a miss), and publishes the command with
// its correlation id as Nats-Msg-Id; a durable consumer hands each command
// to one of 32 workers, which publishes its event (Nats-Msg-Id the event id)
// and acks; a second durable consumer on the events writes each receipt
// (KV create, into a receipts bucket of its own) and acks. Streams and
// windows are agentbus's defaults, on its own embedded nats-server (file
// storage, in-process connection). No envelope rules, no aggregate check,
// no exactly-once machinery, no GC tuning beyond what the process already
// runs with. The tracker observes it as it observes agentbus: a command is
// visible once its event is in the event stream; the receipt written after
// it costs the process CPU, as agentbus's history does, but is not on the
// measured path.
type refPipe struct {
	refBase
	stops  []func()
	wg     sync.WaitGroup
	queues []chan jetstream.Msg
	errMu  sync.Mutex
	errs   map[string]int
}

// refPipeWorkers is how many messages each consumer handles at once, as
// agentbus's processor does by default (processor.workers).
const refPipeWorkers = 32

func startReferencePipeline() (*refPipe, error) {
	r := &refPipe{errs: map[string]int{}}
	if err := r.setUp(); err != nil {
		r.Stop()
		return nil, err
	}
	return r, nil
}

func (r *refPipe) setUp() error {
	if err := r.start("refpipe"); err != nil {
		return err
	}
	js := r.js
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, cfg := range []jetstream.StreamConfig{
		{Name: "AGENTBUS_COMMANDS", Subjects: []string{"agentbus.cmd.>"}, Storage: jetstream.FileStorage, Duplicates: 2 * time.Minute, AllowDirect: true},
		{Name: "AGENTBUS_EVENTS", Subjects: []string{"agentbus.evt.>"}, Storage: jetstream.FileStorage, Duplicates: 2 * time.Minute, AllowDirect: true},
	} {
		if _, err := js.CreateStream(ctx, cfg); err != nil {
			return err
		}
	}
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "AGENTBUS_RECEIPTS", History: 1, TTL: 24 * time.Hour, Storage: jetstream.FileStorage})
	if err != nil {
		return err
	}
	work := func(stream string, handle func(jetstream.Msg) error) error {
		c, err := js.CreateOrUpdateConsumer(ctx, stream, jetstream.ConsumerConfig{
			Durable: "bench", AckPolicy: jetstream.AckExplicitPolicy, AckWait: 10 * time.Second, MaxAckPending: 4096,
		})
		if err != nil {
			return err
		}
		queues := make([]chan jetstream.Msg, refPipeWorkers)
		for i := range queues {
			queues[i] = make(chan jetstream.Msg, 64)
			r.wg.Go(func() {
				for m := range queues[i] {
					if err := handle(m); err != nil {
						r.fail(stream, err)
						_ = m.Nak()
						continue
					}
					_ = m.Ack()
				}
			})
		}
		r.queues = append(r.queues, queues...)
		cc, err := c.Consume(func(m jetstream.Msg) {
			h := fnv.New32a()
			h.Write([]byte(m.Headers().Get("Agentbus-Correlation-Id")))
			queues[h.Sum32()%refPipeWorkers] <- m
		}, jetstream.PullMaxMessages(256))
		if err != nil {
			return err
		}
		r.stops = append(r.stops, func() {
			cc.Stop()
			<-cc.Closed() // no callback sends to the queues after this
		})
		return nil
	}
	// The processor: PlaceOrder becomes OrderPlaced.
	err = work("AGENTBUS_COMMANDS", func(m jetstream.Msg) error {
		var cmd struct {
			ID     string `json:"id"`
			Source string `json:"source"`
			Data   struct {
				OrderID string `json:"orderId"`
			} `json:"data"`
		}
		if err := json.Unmarshal(m.Data(), &cmd); err != nil {
			return err
		}
		corr := m.Headers().Get("Agentbus-Correlation-Id")
		id := corr + "-1"
		body, err := json.Marshal(map[string]any{
			"specversion": "1.0", "id": id, "source": "agentbus", "type": "OrderPlaced",
			"datacontenttype": "application/json", "time": time.Now().UTC().Format(time.RFC3339Nano),
			"data": map[string]any{"orderId": cmd.Data.OrderID},
		})
		if err != nil {
			return err
		}
		ev := nats.NewMsg("agentbus.evt.default.order." + bus.ShardOf(cmd.Data.OrderID) + ".OrderPlaced")
		ev.Data = body
		ev.Header.Set(bus.HeaderAggregateID, cmd.Data.OrderID)
		ev.Header.Set(jetstream.MsgIDHeader, id)
		ev.Header.Set("Agentbus-Correlation-Id", corr)
		ev.Header.Set("Agentbus-Causation-Id", cmd.ID)
		_, err = js.PublishMsg(context.Background(), ev)
		return err
	})
	if err != nil {
		return err
	}
	// The receipt projection.
	err = work("AGENTBUS_EVENTS", func(m jetstream.Msg) error {
		meta, err := m.Metadata()
		if err != nil {
			return err
		}
		corr := m.Headers().Get("Agentbus-Correlation-Id")
		receipt := `{"correlationId":"` + corr + `","tenant":"default","status":"processed","events":[` + strconv.FormatUint(meta.Sequence.Stream, 10) + `]}`
		_, err = kv.Create(context.Background(), "default."+corr, []byte(receipt))
		if errors.Is(err, jetstream.ErrKeyExists) {
			return nil // a redelivery
		}
		return err
	})
	if err != nil {
		return err
	}
	return r.serve(func(c echo.Context) error {
		body, env, err := r.command(c)
		if err != nil {
			return err
		}
		ctx := c.Request().Context()
		corr := envelope.CorrelationID("default", env.Source, env.ID)
		if _, err := kv.Get(ctx, "default."+corr); err == nil {
			return c.JSON(http.StatusAccepted, map[string]string{"id": corr, "status": "accepted"})
		} else if !errors.Is(err, jetstream.ErrKeyNotFound) {
			return c.JSON(http.StatusInternalServerError, map[string]string{"error": err.Error()})
		}
		m := nats.NewMsg("agentbus.cmd.default.PlaceOrder")
		m.Data = body
		m.Header.Set(jetstream.MsgIDHeader, corr)
		m.Header.Set("Agentbus-Correlation-Id", corr)
		if _, err := js.PublishMsg(ctx, m); err != nil {
			return c.JSON(http.StatusInternalServerError, map[string]string{"error": err.Error()})
		}
		return c.JSON(http.StatusAccepted, map[string]string{"id": corr, "status": "accepted"})
	})
}

// fail counts a failed message by its stream and error.
func (r *refPipe) fail(stream string, err error) {
	r.errMu.Lock()
	defer r.errMu.Unlock()
	r.errs[stream+": "+err.Error()]++
}

func (r *refPipe) url() string { return r.URL }

func (r *refPipe) observer() (*nats.Conn, error) {
	return nats.Connect("", nats.InProcessServer(r.ns), nats.Name("bench-observer"))
}

func (r *refPipe) logs() string {
	r.errMu.Lock()
	defer r.errMu.Unlock()
	if len(r.errs) == 0 {
		return "none"
	}
	return fmt.Sprint(r.errs)
}

func (r *refPipe) Stop() {
	r.stopHTTP()
	for _, stop := range r.stops {
		stop()
	}
	for _, q := range r.queues {
		close(q)
	}
	r.wg.Wait()
	r.stopNATS()
}
