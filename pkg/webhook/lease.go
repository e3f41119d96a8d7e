package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/errs"
)

// lease is a lease's value.
type lease struct {
	Holder string    `json:"holder"`
	Until  time.Time `json:"until"`
}

func leaseKey(tenant, id string) string { return "lease." + tenant + "." + id }

// kvWait bounds each lease read or write of a scan, so that a slow bucket
// cannot make one scan outlast the leases it renews.
const kvWait = 2 * time.Second

// leases is the lease table: one key per subscription in the state bucket
// (leaseKey), naming the replica that delivers it and until when, taken
// and renewed by compare-and-set, so that no two replicas deliver one
// subscription at once. Used by the dispatcher's scan loop only.
type leases struct {
	kv     bus.KV
	holder string        // this replica
	ttl    time.Duration // how long a lease lasts unless renewed
	scan   time.Duration // how often the scan loop runs
	now    func() time.Time
}

// take takes the lease of key when it is free, expired or held by this
// replica: its revision and expiry, or false.
func (l *leases) take(ctx context.Context, key string) (uint64, time.Time, bool) {
	ctx, cancel := context.WithTimeout(ctx, kvWait)
	defer cancel()
	until := l.now().Add(l.ttl)
	val := mustJSON(lease{Holder: l.holder, Until: until})
	raw, rev, err := l.kv.Get(ctx, key)
	switch {
	case errors.Is(err, errs.ErrNotFound):
		nrev, err := l.kv.Create(ctx, key, val)
		return nrev, until, err == nil
	case err != nil:
		return 0, time.Time{}, false
	}
	var held lease
	if json.Unmarshal(raw, &held) == nil && held.Holder != l.holder && l.now().Before(held.Until) {
		return 0, time.Time{}, false // held by another replica
	}
	nrev, err := l.kv.Update(ctx, key, val, rev)
	return nrev, until, err == nil
}

// due reports whether a lease held until then is to be renewed at this
// scan: once less than half of it is left (every scan when the lease is
// shorter than six scans), so that it is renewed a few scans before its
// worker would stop (held) and a failed renewal is tried again at the next
// scans, without a write per lease at every scan.
func (l *leases) due(until time.Time) bool {
	return until.Sub(l.now()) < max(l.ttl/2, 3*l.scan)
}

// renew extends the lease of key held at revision rev: its new revision
// and expiry, or the bucket's error (errs.ErrConflict: the lease is lost).
func (l *leases) renew(ctx context.Context, key string, rev uint64) (uint64, time.Time, error) {
	ctx, cancel := context.WithTimeout(ctx, kvWait)
	defer cancel()
	until := l.now().Add(l.ttl)
	nrev, err := l.kv.Update(ctx, key, mustJSON(lease{Holder: l.holder, Until: until}), rev)
	return nrev, until, err
}

// held reports whether a lease held until then still holds, with a margin
// of a scan.
func (l *leases) held(until time.Time) bool {
	return l.now().Add(l.scan).Before(until)
}

// release gives a lease up so that another replica takes it at once.
func (l *leases) release(ctx context.Context, key string, rev uint64) {
	val := mustJSON(lease{Holder: "", Until: time.Time{}})
	_, _ = l.kv.Update(ctx, key, val, rev)
}
