package abuse_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/auth"
	"github.com/agentbus/agentbus/pkg/envelope"
	"github.com/agentbus/agentbus/test/testkit"
)

// TestReadFloodLeavesOthersServed floods agentbus, from one read-only key
// under its rate limit, with 45 concurrent pages of limit=1000 of a
// seeded log of readsEvents events, 5 of them filtered by twenty types,
// while another key reads small pages and submits commands. The other
// key's median during the flood stays within a small factor of its median
// between the flood's rounds (both measured here, in turns) and its p99
// under a bound only starvation reaches, the flood is
// answered 200 or 429 with Retry-After (never a 5xx) and shed (429s), every
// command submitted during the flood is processed, and agentbus's NATS
// connection is neither cut nor made a slow consumer.
func TestReadFloodLeavesOthersServed(t *testing.T) {
	s, logged := readsStart(t)
	last := readsSeed(t, s, readsEvents, readsType)
	flooder := readsKey(t, s, auth.ScopeRead)
	reader := readsKey(t, s, auth.ScopeRead, auth.ScopeWrite)

	victim := &http.Client{Timeout: 30 * time.Second}
	small := fmt.Sprintf("%s/events?limit=20&after=%s", s.URL, s.Ops.Reader().Cursor(envelope.DefaultTenant, false, last-100))
	measure := func(lat *readsLatencies, st *readsStatuses, until func() bool) {
		for !until() {
			t0 := time.Now()
			status, ra, _, err := readsCall(victim, http.MethodGet, small, reader, nil)
			lat.add(time.Since(t0))
			st.add(status, ra, err)
		}
	}

	// The flood: 5 twenty-type readers and 40 full-page readers paging
	// through the log again and again, in rounds; the other key reads
	// between the rounds (idle) and during them (busy), so that whatever
	// else the machine does falls on both.
	var flood readsStatuses
	floodClient := &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	twenty := "&" + url.Values{"type": readsTwentyTypes()}.Encode()
	round := func(stop *atomic.Bool, wg *sync.WaitGroup) {
		page := func(query string) {
			defer wg.Done()
			after := "0"
			for !stop.Load() {
				status, ra, body, err := readsCall(floodClient, http.MethodGet, s.URL+"/events?limit=1000&after="+after+query, flooder, nil)
				flood.add(status, ra, err)
				// The page is not decoded: the attacker's CPU is not
				// agentbus's, and here they share the machine.
				switch next, more := readsNext(body); {
				case err != nil || status != http.StatusOK:
					time.Sleep(50 * time.Millisecond) // a client that honours no Retry-After
				case more:
					after = next
				default:
					after = "0"
				}
			}
		}
		for range 5 {
			wg.Add(1)
			go page(twenty)
		}
		for range 40 {
			wg.Add(1)
			go page("")
		}
	}

	// Commands submitted throughout, one every 200ms.
	var stopCmds atomic.Bool
	var cmdWG sync.WaitGroup
	var ids []string
	var cmdSt readsStatuses
	cmdWG.Add(1)
	go func() {
		defer cmdWG.Done()
		for i := 0; !stopCmds.Load(); i++ {
			status, ra, body, err := readsCall(victim, http.MethodPost, s.URL+"/commands", reader, readsPlaceOrder(fmt.Sprintf("flood-%d", i)))
			cmdSt.add(status, ra, err)
			var acc struct{ ID string }
			if err == nil && status == http.StatusAccepted && json.Unmarshal(body, &acc) == nil {
				ids = append(ids, acc.ID)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}()

	var idle, busy readsLatencies
	var idleSt, busySt readsStatuses
	for range 3 {
		end := time.Now().Add(1500 * time.Millisecond)
		measure(&idle, &idleSt, func() bool { return time.Now().After(end) })
		var stop atomic.Bool
		var wg sync.WaitGroup
		round(&stop, &wg)
		time.Sleep(300 * time.Millisecond) // the flood under way
		end = time.Now().Add(2500 * time.Millisecond)
		measure(&busy, &busySt, func() bool { return time.Now().After(end) })
		stop.Store(true)
		wg.Wait()
	}
	stopCmds.Store(true)
	cmdWG.Wait()

	idle99, busy99 := idle.quantile(0.99), busy.quantile(0.99)
	t.Logf("other key: idle p50 %s p99 %s (%d reads), during the flood p50 %s p99 %s (%d reads)",
		idle.quantile(0.5), idle99, idle.count(), busy.quantile(0.5), busy99, busy.count())
	t.Logf("flood answers: %s; other key: reads %s, commands %s", &flood, &busySt, &cmdSt)

	if idleSt.failed()+busySt.failed() > 0 || busySt.get(http.StatusOK) != busy.count() {
		t.Errorf("the other key's reads were not all answered 200 during the flood: %s", &busySt)
	}
	// On a busy 2-core box the flood takes CPU whatever is done, and
	// whatever else runs on the box lands in the tail (a p99 of 171ms
	// against 15 idle was seen beside other suites, with the median at
	// 10ms against 7): the judgement is a generous ratio of the medians
	// (the idle one counted as at least 5ms, so that a very fast idle
	// does not make the factor tiny), which a flood that starved the
	// other key would move, and a loose bound on its p99.
	const factor = 10
	if busy50, base := busy.quantile(0.5), max(idle.quantile(0.5), 5*time.Millisecond); busy50 > factor*base {
		t.Errorf("the other key's median during the flood is %s, over %d × its idle median (%s)", busy50, factor, base)
	}
	// The tail is held to a bound only a starved key reaches: a second, or
	// 30 × the idle p99 where that is more.
	if tail := max(30*max(idle99, 5*time.Millisecond), time.Second); busy99 > tail {
		t.Errorf("the other key's p99 during the flood is %s, over %s", busy99, tail)
	}
	if flood.failed() > 0 {
		t.Errorf("the flood was answered with server errors or not at all: %s", &flood)
	}
	if flood.noRetryAfter > 0 {
		t.Errorf("%d answers of 429 or 503 without Retry-After", flood.noRetryAfter)
	}
	if flood.get(http.StatusOK) == 0 || flood.get(http.StatusTooManyRequests) == 0 {
		t.Errorf("the flood was not served in part and shed in part: %s", &flood)
	}
	if cmdSt.failed() > 0 || len(ids) == 0 {
		t.Errorf("commands during the flood: %s, %d accepted", &cmdSt, len(ids))
	}
	// Every command submitted during the flood is processed.
	for _, id := range ids {
		testkit.EventuallyWithin(t, "the event of command "+id, 15*time.Second, func() bool {
			status, _, body, err := readsCall(victim, http.MethodGet, s.URL+"/events?correlationId="+id, reader, nil)
			var p struct{ Events []json.RawMessage }
			return err == nil && status == http.StatusOK && json.Unmarshal(body, &p) == nil && len(p.Events) == 1
		})
	}
	if n := s.Conn.NC.Stats().Reconnects; n > 0 {
		t.Errorf("agentbus's NATS connection reconnected %d times", n)
	}
	if lines := logged.matching("nats disconnected", "slow consumer", "nats error", "closed pipe"); len(lines) > 0 {
		t.Errorf("agentbus's NATS connection suffered during the flood:\n%v", lines)
	}
}
