package natsjs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"sigs.k8s.io/yaml"
)

// Settings fill the ${...} variables of the stream files.
type Settings struct {
	Prefix          string        // subject prefix, e.g. "agentbus"
	Replicas        int           // 1 embedded, 3 in a cluster
	Storage         string        // file | memory
	CommandMaxAge   time.Duration // 0 = keep forever
	SyntheticMaxAge time.Duration // 0 = keep forever
	DuplicateWindow time.Duration
	// CommandConsumers is the command stream's max_consumers (0: the
	// server's default, 1,000 for nats-server).
	CommandConsumers int
}

// Names derives stream and bucket names from the prefix.
type Names struct {
	Commands, Events, Synthetic, Undelivered, Secrets string
	// Receipts is the receipts bucket of earlier versions, removed at
	// start (DropFormer).
	Receipts string
	// Webhook delivery's (streams/60-webhooks.yaml): cursors and leases,
	// delivery records, dead letters.
	Webhooks, Deliveries, DeadLetters string
}

// NamesFor returns the names the stream files produce for prefix.
func NamesFor(prefix string) Names {
	p := upperPrefix(prefix)
	return Names{Commands: p + "_COMMANDS", Events: p + "_EVENTS", Synthetic: p + "_SYNTHETIC", Receipts: p + "_RECEIPTS",
		Undelivered: p + "_UNDELIVERED", Secrets: p + "_SECRETS",
		Webhooks: p + "_WEBHOOKS", Deliveries: p + "_DELIVERIES", DeadLetters: p + "_DEADLETTER"}
}

func upperPrefix(prefix string) string {
	return strings.ToUpper(strings.NewReplacer("-", "_", ".", "_").Replace(prefix))
}

func (s Settings) vars() map[string]string {
	return map[string]string{
		"prefix":           s.Prefix,
		"PREFIX":           upperPrefix(s.Prefix),
		"replicas":         strconv.Itoa(max(s.Replicas, 1)),
		"storage":          orDefault(s.Storage, "file"),
		"commandMaxAge":    s.CommandMaxAge.String(),
		"syntheticMaxAge":  s.SyntheticMaxAge.String(),
		"duplicateWindow":  s.DuplicateWindow.String(),
		"commandConsumers": strconv.Itoa(s.CommandConsumers),
		"$":                "$", // "$$" is a literal "$"
	}
}

// Spec is one declarative definition: a stream, a KV bucket or a consumer.
type Spec struct {
	File            string   `json:"-"`
	Kind            string   `json:"kind"`
	Name            string   `json:"name"`
	Description     string   `json:"description"`
	Subjects        []string `json:"subjects"`
	Storage         string   `json:"storage"`
	Replicas        int      `json:"replicas"`
	Retention       string   `json:"retention"`
	Discard         string   `json:"discard"`
	MaxAge          duration `json:"max_age"`
	DuplicateWindow duration `json:"duplicate_window"`
	AllowDirect     bool     `json:"allow_direct"`
	AllowAtomic     bool     `json:"allow_atomic"`
	DenyDelete      bool     `json:"deny_delete"`
	DenyPurge       bool     `json:"deny_purge"`
	MaxConsumers    int      `json:"max_consumers"` // 0: the server's default
	// RePublish, when set, has the server publish each stored message
	// (its headers only, when HeadersOnly) on Destination, mapped from
	// Source: word that it is stored (see Log.Follow).
	RePublish *struct {
		Source      string `json:"source"`
		Destination string `json:"destination"`
		HeadersOnly bool   `json:"headers_only"`
	} `json:"republish"`
	// kv
	TTL     duration `json:"ttl"`
	History int      `json:"history"`
	// consumer
	Stream         string     `json:"stream"`
	AckWait        duration   `json:"ack_wait"`
	MaxDeliver     int        `json:"max_deliver"`
	MaxAckPending  int        `json:"max_ack_pending"`
	FilterSubjects []string   `json:"filter_subjects"`
	Backoff        []duration `json:"backoff"`
}

type duration time.Duration

func (d *duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("duration must be a string like \"30s\"")
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	*d = duration(v)
	return nil
}

// LoadSpecs reads every *.yaml in fsys (documents separated by "---"),
// substituting settings. An unknown variable or field is an error.
func LoadSpecs(fsys fs.FS, s Settings) ([]Spec, error) {
	names, err := fs.Glob(fsys, "*.yaml")
	if err != nil {
		return nil, err
	}
	sort.Strings(names)
	vars := s.vars()
	var out []Spec
	for _, name := range names {
		raw, err := fs.ReadFile(fsys, name)
		if err != nil {
			return nil, err
		}
		var missing []string
		text := os.Expand(string(raw), func(k string) string {
			v, ok := vars[k]
			if !ok {
				missing = append(missing, k)
			}
			return v
		})
		if len(missing) > 0 {
			return nil, fmt.Errorf("streams/%s: unknown variable(s) %s", name, strings.Join(missing, ", "))
		}
		for i, doc := range strings.Split(text, "\n---\n") {
			var sp Spec
			if err := yaml.UnmarshalStrict([]byte(doc), &sp); err != nil {
				return nil, fmt.Errorf("streams/%s document %d: %w", name, i+1, err)
			}
			sp.File = path.Base(name)
			out = append(out, sp)
		}
	}
	return out, nil
}

// Apply creates or updates every spec, idempotently. For streams it compares
// the config the server echoes back with what was asked and fails when the
// server dropped a setting (an old or misconfigured server); a consumer is
// done once it filters on the subjects asked for (see putConsumer).
// overrides sets the filter subjects of consumers by name
// ("STREAM/consumer"); an override that is present but lists no subject
// (nil or empty) removes the consumer instead, as a consumer without a
// filter would take everything.
func (c *Conn) Apply(ctx context.Context, specs []Spec, overrides map[string][]string) error {
	for _, sp := range specs {
		var err error
		switch sp.Kind {
		case "stream":
			err = c.applyStream(ctx, sp)
		case "kv":
			err = c.applyKV(ctx, sp)
		case "consumer":
			f, ok := overrides[sp.Stream+"/"+sp.Name]
			if ok && len(f) == 0 {
				err = untilSettled(ctx, func(ctx context.Context) error {
					return c.JS.DeleteConsumer(ctx, sp.Stream, sp.Name)
				})
				if errors.Is(err, jetstream.ErrConsumerNotFound) {
					err = nil
				}
				break
			}
			if ok {
				sp.FilterSubjects = f
			}
			err = c.applyConsumer(ctx, sp)
		default:
			err = fmt.Errorf("unknown kind %q (stream, kv or consumer)", sp.Kind)
		}
		if err != nil {
			return fmt.Errorf("streams/%s %s %s: %w", sp.File, sp.Kind, sp.Name, err)
		}
	}
	return nil
}

func storageOf(s string) (jetstream.StorageType, error) {
	switch s {
	case "", "file":
		return jetstream.FileStorage, nil
	case "memory":
		return jetstream.MemoryStorage, nil
	}
	return 0, fmt.Errorf("storage must be file or memory, not %q", s)
}

func (c *Conn) applyStream(ctx context.Context, sp Spec) error {
	st, err := storageOf(sp.Storage)
	if err != nil {
		return err
	}
	cfg := jetstream.StreamConfig{
		Name: sp.Name, Description: sp.Description, Subjects: sp.Subjects, Storage: st,
		Replicas: max(sp.Replicas, 1), MaxAge: time.Duration(sp.MaxAge), Duplicates: time.Duration(sp.DuplicateWindow),
		AllowDirect: sp.AllowDirect, AllowAtomicPublish: sp.AllowAtomic, DenyDelete: sp.DenyDelete, DenyPurge: sp.DenyPurge,
		MaxConsumers: sp.MaxConsumers,
	}
	if rp := sp.RePublish; rp != nil {
		cfg.RePublish = &jetstream.RePublish{Source: rp.Source, Destination: rp.Destination, HeadersOnly: rp.HeadersOnly}
	}
	switch sp.Retention {
	case "", "limits":
		cfg.Retention = jetstream.LimitsPolicy
	case "interest":
		cfg.Retention = jetstream.InterestPolicy
	case "workqueue":
		cfg.Retention = jetstream.WorkQueuePolicy
	default:
		return fmt.Errorf("retention must be limits, interest or workqueue")
	}
	if sp.Discard == "new" {
		cfg.Discard = jetstream.DiscardNew
	}
	var s jetstream.Stream
	err = untilSettled(ctx, func(ctx context.Context) (err error) {
		s, err = c.JS.CreateOrUpdateStream(ctx, cfg)
		return err
	})
	if err != nil {
		return err
	}
	got := s.CachedInfo().Config
	var lost []string
	check := func(name string, ok bool) {
		if !ok {
			lost = append(lost, name)
		}
	}
	check("allow_atomic", got.AllowAtomicPublish == cfg.AllowAtomicPublish)
	check("allow_direct", got.AllowDirect == cfg.AllowDirect)
	check("deny_delete", got.DenyDelete == cfg.DenyDelete)
	check("deny_purge", got.DenyPurge == cfg.DenyPurge)
	check("subjects", slices.Equal(got.Subjects, cfg.Subjects))
	check("max_age", got.MaxAge == cfg.MaxAge)
	check("replicas", got.Replicas == cfg.Replicas)
	if cfg.Duplicates > 0 {
		check("duplicate_window", got.Duplicates == cfg.Duplicates)
	}
	if cfg.MaxConsumers > 0 {
		check("max_consumers", got.MaxConsumers == cfg.MaxConsumers)
	}
	if cfg.RePublish != nil {
		check("republish", got.RePublish != nil && *got.RePublish == *cfg.RePublish)
	}
	if len(lost) > 0 {
		return fmt.Errorf("nats-server %s did not keep %s as requested (agentbus needs nats-server 2.12 or newer)", c.NC.ConnectedServerVersion(), strings.Join(lost, ", "))
	}
	return nil
}

func (c *Conn) applyKV(ctx context.Context, sp Spec) error {
	st, err := storageOf(sp.Storage)
	if err != nil {
		return err
	}
	return untilSettled(ctx, func(ctx context.Context) error {
		_, err := c.JS.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
			Bucket: sp.Name, Description: sp.Description, TTL: time.Duration(sp.TTL),
			History: uint8(max(sp.History, 1)), Storage: st, Replicas: max(sp.Replicas, 1),
		})
		return err
	})
}

func (c *Conn) applyConsumer(ctx context.Context, sp Spec) error {
	cfg := jetstream.ConsumerConfig{
		Durable: sp.Name, Description: sp.Description, AckPolicy: jetstream.AckExplicitPolicy,
		AckWait: time.Duration(sp.AckWait), MaxDeliver: sp.MaxDeliver, MaxAckPending: sp.MaxAckPending,
		DeliverPolicy: jetstream.DeliverAllPolicy,
	}
	switch len(sp.FilterSubjects) {
	case 0:
	case 1:
		cfg.FilterSubject = sp.FilterSubjects[0]
	default:
		cfg.FilterSubjects = sp.FilterSubjects
	}
	for _, b := range sp.Backoff {
		cfg.BackOff = append(cfg.BackOff, time.Duration(b))
	}
	return untilSettled(ctx, func(ctx context.Context) error {
		return putConsumer(ctx, c.JS, sp.Stream, cfg, c.JS.CreateOrUpdateConsumer)
	})
}

// Former names what an earlier version of agentbus declared and this one
// no longer does: consumers (by stream) and key-value buckets.
type Former struct {
	Consumers map[string][]string // stream -> consumer names
	Buckets   []string
}

// DropFormer removes what f names, where it exists, and returns what it
// removed ("stream/consumer", "bucket").
func (c *Conn) DropFormer(ctx context.Context, f Former) ([]string, error) {
	var dropped []string
	for _, stream := range slices.Sorted(maps.Keys(f.Consumers)) {
		for _, name := range f.Consumers[stream] {
			err := c.JS.DeleteConsumer(ctx, stream, name)
			switch {
			case err == nil:
				dropped = append(dropped, stream+"/"+name)
			case errors.Is(err, jetstream.ErrConsumerNotFound), errors.Is(err, jetstream.ErrStreamNotFound):
			default:
				return dropped, fmt.Errorf("remove the former consumer %s of %s: %w", name, stream, err)
			}
		}
	}
	for _, b := range f.Buckets {
		err := c.JS.DeleteKeyValue(ctx, b)
		switch {
		case err == nil:
			dropped = append(dropped, b)
		case errors.Is(err, jetstream.ErrBucketNotFound), errors.Is(err, jetstream.ErrStreamNotFound):
		default:
			return dropped, fmt.Errorf("remove the former bucket %s: %w", b, err)
		}
	}
	return dropped, nil
}
