package reconcile

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/decide"
	"github.com/agentbus/agentbus/pkg/errs"
)

// agentRef names an agent.
type agentRef struct{ tenant, id string }

// retryState is an agent waiting to be reconciled again.
type retryState struct {
	atLeast uint64 // the agent event its consumer must reflect
	tries   int    // failed tries so far
	due     time.Time
	err     error // of the last try
}

// later has the agent reconciled again after its failed tries so far
// (merged with a retry already waiting: the later event, the more tries).
func (c *AgentConsumers) later(ref agentRef, st *retryState) {
	c.mu.Lock()
	if cur := c.waiting[ref]; cur != nil {
		st.atLeast, st.tries = max(st.atLeast, cur.atLeast), max(st.tries, cur.tries)
	}
	st.due = c.now().Add(c.retry.Backoff(uint64(st.tries)))
	c.waiting[ref] = st
	c.mu.Unlock()
	c.poke()
}

// forget drops the agent's waiting retry once its consumer reflects the
// agent event applied.
func (c *AgentConsumers) forget(ref agentRef, applied uint64) {
	c.mu.Lock()
	if cur := c.waiting[ref]; cur != nil && cur.atLeast <= applied {
		delete(c.waiting, ref)
	}
	c.mu.Unlock()
}

func (c *AgentConsumers) poke() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// Run tries again, until ctx ends, the agents whose reconciliation failed
// (Project leaves them here), at most Retry.Workers at once, each after
// its backoff; after Retry.Attempts tries in all, the failure is recorded
// (AgentConsumerFailed). It starts with every registered agent that
// accepts something and is not failed, as a restart finds them, so that
// retries a stopped replica had waiting are not lost; call it once the
// registries are replayed. It also takes up every agent consumer on the
// command log whose agent the registry no longer has (a deletion whose
// consumer delete failed before a stop). It returns once its retries
// under way end.
func (c *AgentConsumers) Run(ctx context.Context) {
	c.sweep(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		for _, job := range c.due() {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c.retryOnce(ctx, job.ref, job.st)
				c.mu.Lock()
				c.running--
				c.mu.Unlock()
				c.poke()
			}()
		}
		timer.Reset(c.untilNext())
		select {
		case <-ctx.Done():
			return
		case <-c.wake:
		case <-timer.C:
		}
	}
}

// sweep has reconciled (at once) every registered agent that accepts
// something, is not recorded as failed, and whose consumer does not
// reflect its last event (missing, or its applied sequence behind the
// registry's, or its pause not the agent's), and every orphan consumer
// (orphans). The consumers are read in one listing: a start costs what
// changed, not a round of requests per agent. When the listing fails,
// every such agent is reconciled.
func (c *AgentConsumers) sweep(ctx context.Context) {
	states, err := c.consumers.Consumers(ctx, bus.AgentConsumerPrefix)
	if err != nil {
		c.log.Warn("listing the agents' consumers failed; reconciling every agent, and a deleted agent's consumer may stay until the next start", "err", err)
	}
	byName := make(map[string]*bus.ConsumerState, len(states))
	for i := range states {
		byName[states[i].Name] = &states[i]
	}
	refs := []agentRef{}
	known := map[agentRef]bool{}
	c.agents.All(func(tenant string, rec decide.Agent, seq uint64) {
		known[agentRef{tenant, rec.ID}] = true
		if len(rec.Accepts) == 0 || rec.Status == decide.AgentFailed {
			return
		}
		if st := byName[bus.AgentConsumer(tenant, rec.ID)]; st != nil && appliedSeq(st) >= seq && st.Paused == (rec.Status == decide.AgentPaused) {
			return // reflects the agent's last event
		}
		refs = append(refs, agentRef{tenant, rec.ID})
	})
	refs = append(refs, c.orphans(ctx, known, states)...)
	c.mu.Lock()
	now := c.now()
	for _, ref := range refs {
		if c.waiting[ref] == nil {
			c.waiting[ref] = &retryState{due: now}
		}
	}
	c.mu.Unlock()
	c.log.Debug("agents' consumers swept", "consumers", len(states), "agents", len(known), "reconciling", len(refs))
}

// orphans returns the agents that have a consumer on the command log
// (among states) and events in the event log but no record in the
// registry: deleted agents whose consumer outlived them. A consumer named
// like an agent's without any agent events is not agentbus's doing and is
// left alone.
func (c *AgentConsumers) orphans(ctx context.Context, known map[agentRef]bool, states []bus.ConsumerState) []agentRef {
	var out []agentRef
	for _, st := range states {
		tenant, id, ok := bus.ParseAgentConsumer(st.Name)
		ref := agentRef{tenant, id}
		if !ok || known[ref] {
			continue
		}
		if _, err := c.events.Last(ctx, c.subj.Aggregate(tenant, decide.AggAgent, id)); err != nil {
			continue
		}
		c.log.Info("an agent's consumer outlived its agent; deleting it", "tenant", tenant, "agent", id, "consumer", st.Name)
		out = append(out, ref)
	}
	return out
}

type retryJob struct {
	ref agentRef
	st  *retryState
}

// due takes the retries that are due, as many as there are free workers.
func (c *AgentConsumers) due() []retryJob {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	var jobs []retryJob
	for ref, st := range c.waiting {
		if c.running >= c.retry.Workers {
			break
		}
		if !st.due.After(now) {
			delete(c.waiting, ref)
			jobs = append(jobs, retryJob{ref, st})
			c.running++
		}
	}
	return jobs
}

// untilNext is how long until the next retry is due (an hour when none
// waits; a second when the workers are busy, though a finished retry
// wakes Run anyway).
func (c *AgentConsumers) untilNext() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	next := time.Hour
	if c.running >= c.retry.Workers {
		return time.Second
	}
	now := c.now()
	for _, st := range c.waiting {
		next = min(next, max(st.due.Sub(now), time.Millisecond))
	}
	return next
}

// retryOnce reconciles the agent again: done, recorded as failed once it
// cannot be made or after the last try, or left waiting for the next.
func (c *AgentConsumers) retryOnce(ctx context.Context, ref agentRef, st *retryState) {
	rctx, cancel := context.WithTimeout(ctx, reconcileTimeout)
	applied, err := c.reconcile(rctx, ref.tenant, ref.id, st.atLeast)
	cancel()
	if err == nil {
		c.forget(ref, applied)
		return
	}
	if ctx.Err() != nil {
		return // stopping: the next start's sweep takes it up
	}
	st.tries++
	st.err = err
	var f *failure
	switch {
	case errors.Is(err, errs.ErrUnavailable):
		st.tries = min(st.tries, c.retry.Attempts-1) // for as long as NATS is unavailable
	case errors.As(err, &f) && (f.final() || st.tries >= c.retry.Attempts):
		rerr := c.record(ctx, ref.tenant, ref.id, f)
		if rerr == nil {
			return
		}
		st.err, st.tries = rerr, min(st.tries, c.retry.Attempts-1) // try to record it again
	case st.tries >= c.retry.Attempts:
		c.log.Error("reconcile an agent's consumer failed for good; giving up until the agent's next change", "tenant", ref.tenant, "agent", ref.id, "tries", st.tries, "err", err)
		return
	}
	if st.tries > 3 {
		c.log.Warn("reconcile an agent's consumer failed; will retry", "tenant", ref.tenant, "agent", ref.id, "tries", st.tries, "err", st.err)
	}
	c.later(ref, st)
}
