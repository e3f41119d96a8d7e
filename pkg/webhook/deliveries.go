package webhook

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
	kv  bus.KV
	w   bus.KVWatcher
	log *slog.Logger
}

// NewDeliveries returns the records of kv (which must also be a
// bus.KVWatcher to be listed).
func NewDeliveries(kv bus.KV, log *slog.Logger) *Deliveries {
	w, _ := kv.(bus.KVWatcher)
	return &Deliveries{kv: kv, w: w, log: log}
}

func deliveryKey(tenant, corr, sub string, seq uint64) string {
	if corr == "" {
		corr = "_"
	}
	return tenant + "." + corr + "." + sub + "." + strconv.FormatUint(seq, 10)
}

// record adds an attempt to its delivery's record and returns the record.
// prior is the record as known before the attempt (read when nil). Only
// the worker that holds the subscription's lease writes it; a failure is
// logged, never fatal to the delivery.
func (x *Deliveries) record(ctx context.Context, s *Subscription, it *item, res result, prior *Delivery) *Delivery {
	key := deliveryKey(s.Tenant, it.corr, s.ID, it.eventSeq)
	var rec Delivery
	if prior != nil {
		rec = *prior
		rec.Attempts = slices.Clone(prior.Attempts)
	} else if raw, _, err := x.kv.Get(ctx, key); err == nil {
		_ = json.Unmarshal(raw, &rec)
	} else if !errors.Is(err, errs.ErrNotFound) {
		x.log.Warn("webhooks: reading a delivery record failed", "key", key, "err", err)
	}
	rec.Subscription, rec.EventID, rec.EventType, rec.EventSeq, rec.Correlation = s.ID, it.eventID, it.eventType, it.eventSeq, it.corr
	rec.Attempts = append(rec.Attempts, Attempt{At: res.At.UTC(), StatusCode: res.Status,
		LatencyMS: float64(res.Latency.Microseconds()) / 1000, Error: res.Err, Response: res.Response})
	if len(rec.Attempts) > maxAttempts {
		rec.Attempts = rec.Attempts[len(rec.Attempts)-maxAttempts:]
	}
	rec.Status = Retrying
	if res.ok() {
		rec.Status = Delivered
	}
	if _, err := x.kv.Put(ctx, key, mustJSON(rec)); err != nil {
		x.log.Warn("webhooks: writing a delivery record failed", "key", key, "err", err)
	}
	return &rec
}

// markFailed says a delivery ended dead-lettered.
func (x *Deliveries) markFailed(ctx context.Context, s *Subscription, it *item, rec *Delivery) {
	if rec == nil {
		return
	}
	failed := *rec
	failed.Status = Failed
	_, _ = x.kv.Put(ctx, deliveryKey(s.Tenant, it.corr, s.ID, it.eventSeq), mustJSON(failed))
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
