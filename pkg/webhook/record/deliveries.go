package record

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"slices"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/errs"
)

// Delivery is the record of one event's delivery to one subscription: its
// attempts, newest last. It holds no secret and at most the first KiB of
// each answer.
type Delivery struct {
	Subscription string    `json:"subscriptionId"`
	EventID      string    `json:"eventId"`
	EventType    string    `json:"eventType,omitempty"`
	EventSeq     uint64    `json:"eventSeq"`
	Correlation  string    `json:"correlationId,omitempty"`
	Status       string    `json:"status"` // delivered | retrying | failed
	Attempts     []Attempt `json:"attempts"`
}

// Attempt is one try.
type Attempt struct {
	At         time.Time `json:"at"`
	StatusCode int       `json:"statusCode,omitempty"`
	LatencyMS  float64   `json:"latencyMs"`
	Error      string    `json:"error,omitempty"`
	Response   string    `json:"response,omitempty"`
}

// Delivery statuses.
const (
	Delivered = "delivered"
	Retrying  = "retrying"
	Failed    = "failed"
)

// maxAttempts bounds the attempts a record keeps (the newest).
const maxAttempts = 20

// Deliveries keeps the delivery records in a KV bucket (with a TTL), keyed
// "<tenant>.<correlation id or _>.<subscription>.<event seq>", so that a
// command's trace and a subscription's list each read one key pattern.
// Safe for concurrent use.
type Deliveries struct {
	kv    bus.KV
	async bus.AsyncKV // kv, when it sends puts without waiting
	w     bus.KVWatcher
	log   *slog.Logger
}

// NewDeliveries returns the records of kv (which must also be a
// bus.KVWatcher to be listed; a bus.AsyncKV has its records written off
// the delivery path, see record).
func NewDeliveries(kv bus.KV, log *slog.Logger) *Deliveries {
	w, _ := kv.(bus.KVWatcher)
	async, _ := kv.(bus.AsyncKV)
	return &Deliveries{kv: kv, async: async, w: w, log: log}
}

// Sent is a record's put in flight (Record), to be waited for (Stored).
type Sent struct {
	key string
	val []byte
	put bus.PendingPut
}

// Of names the delivery a record is of: an event of the log to a
// subscription of a tenant.
type Of struct {
	Tenant, Subscription string
	EventID, EventType   string
	EventSeq             uint64
	Correlation          string // the event's command; "" when none
}

func deliveryKey(tenant, corr, sub string, seq uint64) string {
	if corr == "" {
		corr = "_"
	}
	return tenant + "." + corr + "." + sub + "." + strconv.FormatUint(seq, 10)
}

// Record adds attempt a to the record of delivery of, sets the record's
// status, and returns the record. prior is the record as known before the
// attempt (read when nil). Only the worker that holds the subscription's
// lease writes it; a failure is logged, never fatal to the delivery. On a
// bus.AsyncKV the put is sent without waiting for it and returned (else
// nil): the caller waits for it (Stored) before it writes a cursor past
// the delivery.
func (x *Deliveries) Record(ctx context.Context, of Of, a Attempt, prior *Delivery, status string) (*Delivery, *Sent) {
	key := deliveryKey(of.Tenant, of.Correlation, of.Subscription, of.EventSeq)
	var rec Delivery
	if prior != nil {
		rec = *prior
		rec.Attempts = slices.Clone(prior.Attempts)
	} else if raw, _, err := x.kv.Get(ctx, key); err == nil {
		_ = json.Unmarshal(raw, &rec)
	} else if !errors.Is(err, errs.ErrNotFound) {
		x.log.Warn("webhooks: reading a delivery record failed", "key", key, "err", err)
	}
	rec.Subscription, rec.EventID, rec.EventType, rec.EventSeq, rec.Correlation = of.Subscription, of.EventID, of.EventType, of.EventSeq, of.Correlation
	rec.Attempts = append(rec.Attempts, a)
	if len(rec.Attempts) > maxAttempts {
		rec.Attempts = rec.Attempts[len(rec.Attempts)-maxAttempts:]
	}
	rec.Status = status
	val, err := json.Marshal(rec)
	if err != nil {
		panic(err) // a Delivery always encodes
	}
	if x.async != nil {
		if put, err := x.async.PutAsync(key, val); err == nil {
			return &rec, &Sent{key: key, val: val, put: put}
		}
		// Not sent (too many in flight, say): put it now.
	}
	x.put(ctx, key, val)
	return &rec, nil
}

// put writes a record and waits; a failure is logged.
func (x *Deliveries) put(ctx context.Context, key string, val []byte) {
	if _, err := x.kv.Put(ctx, key, val); err != nil {
		x.log.Warn("webhooks: writing a delivery record failed", "key", key, "err", err)
	}
}

// Stored waits for the records sent and returns false when ctx ended
// first (some may not be stored yet). A record whose put failed or got no
// answer is put again, and waited for; failing again, it is logged.
func (x *Deliveries) Stored(ctx context.Context, sent []*Sent) bool {
	for i, r := range sent {
		_, err := r.put.Wait(ctx)
		switch {
		case err == nil:
		case ctx.Err() != nil:
			return false
		case slices.ContainsFunc(sent[i+1:], func(later *Sent) bool { return later.key == r.key }):
			// A later value of the key is on its way: this one is stale.
		default:
			x.put(ctx, r.key, r.val)
		}
	}
	return true
}

// OfCommand returns the delivery records of the events of command corr of
// tenant, by event sequence then subscription.
func (x *Deliveries) OfCommand(ctx context.Context, tenant, corr string) ([]Delivery, error) {
	return x.list(ctx, tenant+"."+corr+".>")
}

// OfSubscription returns the delivery records of subscription id of
// tenant (those still kept), by event sequence.
func (x *Deliveries) OfSubscription(ctx context.Context, tenant, id string) ([]Delivery, error) {
	return x.list(ctx, tenant+".*."+id+".*")
}

func (x *Deliveries) list(ctx context.Context, pattern string) ([]Delivery, error) {
	if x.w == nil {
		return nil, errors.New("the delivery records cannot be listed")
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		mu    sync.Mutex
		byKey = map[string]Delivery{} // the last value seen of each key
		done  bool                    // the current values are in: later changes are not
	)
	err := x.w.Watch(wctx, pattern, func(c bus.KVChange) {
		var d Delivery
		mu.Lock()
		defer mu.Unlock()
		switch {
		case done:
		case c.Deleted:
			delete(byKey, c.Key)
		case json.Unmarshal(c.Value, &d) == nil:
			byKey[c.Key] = d
		}
	})
	mu.Lock()
	done = true
	out := make([]Delivery, 0, len(byKey))
	for _, d := range byKey {
		out = append(out, d)
	}
	mu.Unlock()
	cancel()
	if err != nil {
		return nil, err
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].EventSeq != out[j].EventSeq {
			return out[i].EventSeq < out[j].EventSeq
		}
		return out[i].Subscription < out[j].Subscription
	})
	return out, nil
}
