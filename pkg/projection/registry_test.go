package projection_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/decide"
	"github.com/agentbus/agentbus/pkg/localstore/localstoretest"
	"github.com/agentbus/agentbus/pkg/projection"
)

var regSubjects = bus.Subjects{Prefix: "agentbus"}

// eventLog is an event log in memory that records where each read of it
// starts.
type eventLog struct {
	bus.Log
	mu    sync.Mutex
	msgs  []*bus.Message
	reads []logRead
}

// logRead is one Range of the log.
type logRead struct {
	filter string
	from   uint64
}

func (l *eventLog) Range(_ context.Context, filter string, from uint64, max int) ([]*bus.Message, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.reads = append(l.reads, logRead{filter, from})
	var out []*bus.Message
	for _, m := range l.msgs {
		if m.Seq >= from && bus.SubjectMatches(m.Subject, filter) && len(out) < max {
			out = append(out, m)
		}
	}
	return out, nil
}

// add appends an event of aggregate aggType/id of tenant's, with data,
// and returns its sequence.
func (l *eventLog) add(tenant, aggType, id, typ string, data any) uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	seq := uint64(len(l.msgs) + 1)
	env, _ := json.Marshal(map[string]any{"id": fmt.Sprint("e-", seq), "type": typ, "data": data})
	l.msgs = append(l.msgs, &bus.Message{Subject: regSubjects.Event(bus.RootEvents, tenant, aggType, id, typ), Seq: seq, Data: env})
	return seq
}

// takeReads returns the reads since the last call, and forgets them.
func (l *eventLog) takeReads() []logRead {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.reads
	l.reads = nil
	return out
}

// lastOf returns the sequence of the log's last event matching filter.
func (l *eventLog) lastOf(filter string) uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	var last uint64
	for _, m := range l.msgs {
		if bus.SubjectMatches(m.Subject, filter) {
			last = m.Seq
		}
	}
	return last
}

// registration, change and subscription are the data of registry events.
func registration(id string, accepts ...string) decide.Registration {
	return decide.Registration{ID: id, Name: "name of " + id, Description: "<" + id + "> & more", Accepts: accepts,
		CreatedAt: "2026-01-02T03:04:05.123456789Z"}
}

func change(id string) decide.Change { return decide.Change{ID: id, At: "2026-01-02T04:00:00Z"} }

func subscription(id string, types ...string) decide.SubscriptionCreatedData {
	d := decide.SubscriptionCreatedData{ID: id, Webhook: decide.Webhook{URL: "https://hooks.example/" + id},
		Status: decide.SubscriptionActive, CreatedAt: "2026-01-02T03:04:05Z"}
	if types != nil {
		d.ServiceID, d.Filter = "svc", &decide.Filter{Types: types}
	}
	return d
}

// registryFilters are the event log filters of the three registries.
var registryFilters = map[string]string{
	decide.AggAgent:        regSubjects.Event(bus.RootEvents, "*", decide.AggAgent, "*", "*"),
	decide.AggService:      regSubjects.Event(bus.RootEvents, "*", decide.AggService, "*", "*"),
	decide.AggSubscription: regSubjects.Event(bus.RootEvents, "*", decide.AggSubscription, "*", "*"),
}

// startRegistries starts registries of log on disk, on a tail that hands
// them nothing: what they hold once started, they read from the disk and
// the log. It checks that each follows the tail from the event after the
// log's last of its own, and returns them and a function that waits until
// the disk holds each up to there and stops them.
func startRegistries(t *testing.T, disk bus.Disk, log *eventLog) (*projection.Registries, func()) {
	t.Helper()
	regs := projection.NewRegistries(log, disk, regSubjects, slog.New(slog.DiscardHandler))
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	tail := &handTail{}
	if err := regs.StartOn(ctx, tail); err != nil {
		t.Fatal(err)
	}
	if len(tail.follows) != len(registryFilters) {
		t.Fatalf("the registries follow the tail %d times, want %d", len(tail.follows), len(registryFilters))
	}
	for _, f := range tail.follows {
		if want := log.lastOf(f.filter) + 1; f.from != want {
			t.Errorf("%s followed from %d, want %d (after the log's last event of its own)", f.filter, f.from, want)
		}
	}
	return regs, func() {
		t.Helper()
		held := heldOnDisk(regs)
		for agg, filter := range registryFilters {
			want := log.lastOf(filter)
			for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
				got, err := held[agg]()
				if err != nil {
					t.Fatal(err)
				}
				if got == want {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the %s registry on disk holds the log up to %d, want %d", agg, got, want)
				}
			}
		}
		cancel()
	}
}

// heldOnDisk returns, by aggregate type, what reads the log sequence the
// disk holds each registry at, 0 while some of its changes are not
// written yet.
func heldOnDisk(regs *projection.Registries) map[string]func() (uint64, error) {
	return map[string]func() (uint64, error){
		decide.AggAgent:        func() (uint64, error) { return heldIfWritten(regs.Agents) },
		decide.AggService:      func() (uint64, error) { return heldIfWritten(regs.Services) },
		decide.AggSubscription: func() (uint64, error) { return heldIfWritten(regs.Subscriptions) },
	}
}

func heldIfWritten[T any](r *projection.Registry[T]) (uint64, error) {
	if !projection.RegistryWritten(r) {
		return 0, nil
	}
	return projection.RegistryHeld(r)
}

// registryState is all a registry answers: each record with the sequence
// of its aggregate's last event, and each tenant's ids in list order.
type registryState[T any] struct {
	Records map[string]T
	Seqs    map[string]uint64
	Lists   map[string][]T
}

func stateOf[T any](r *projection.Registry[T]) registryState[T] {
	s := registryState[T]{Records: map[string]T{}, Seqs: map[string]uint64{}, Lists: map[string][]T{}}
	r.All(func(tenant string, rec T, seq uint64) {
		id := reflect.ValueOf(rec).FieldByName("ID").String()
		s.Records[tenant+"/"+id], s.Seqs[tenant+"/"+id] = rec, seq
	})
	for _, tenant := range r.Tenants() {
		s.Lists[tenant], _ = r.List(tenant, "", 1000)
	}
	return s
}

// sameRegistries fails t unless got answers as want does, record by
// record (decoded from the disk or folded, they must be equal, nil and
// empty slices apart).
func sameRegistries(t *testing.T, what string, got, want *projection.Registries) {
	t.Helper()
	if g, w := stateOf(got.Agents), stateOf(want.Agents); !reflect.DeepEqual(g, w) {
		t.Errorf("%s: agents\n got %+v\nwant %+v", what, g, w)
	}
	if g, w := stateOf(got.Services), stateOf(want.Services); !reflect.DeepEqual(g, w) {
		t.Errorf("%s: services\n got %+v\nwant %+v", what, g, w)
	}
	if g, w := stateOf(got.Subscriptions), stateOf(want.Subscriptions); !reflect.DeepEqual(g, w) {
		t.Errorf("%s: subscriptions\n got %+v\nwant %+v", what, g, w)
	}
}

// registryEvents appends to log the events the registries are built of
// before their first stop: records of each kind, changed, and deleted.
func registryEvents(log *eventLog) {
	log.add("a", decide.AggAgent, "ag1", decide.TypeAgentRegistered, registration("ag1", "ChargeCustomer"))
	log.add("a", "Order", "o1", "OrderPlaced", map[string]any{}) // another aggregate's
	log.add("a", decide.AggAgent, "ag2", decide.TypeAgentRegistered, registration("ag2"))
	log.add("a", decide.AggAgent, "ag2", decide.TypeAgentPaused, change("ag2"))
	log.add("a", decide.AggAgent, "ag3", decide.TypeAgentRegistered, registration("ag3"))
	log.add("a", decide.AggAgent, "ag3", decide.TypeAgentDeleted, change("ag3"))
	log.add("a", decide.AggAgent, "ag2", "SomethingElse", map[string]any{}) // the record's sequence moves
	log.add("b", decide.AggAgent, "ag1", decide.TypeAgentRegistered, registration("ag1", "ShipOrder"))
	log.add("a", decide.AggService, "s1", decide.TypeServiceRegistered, registration("s1", "PlaceOrder"))
	log.add("a", decide.AggService, "s2", decide.TypeServiceRegistered, registration("s2"))
	log.add("a", decide.AggService, "s2", decide.TypeServiceDeleted, change("s2"))
	log.add("a", decide.AggSubscription, "sub1", decide.TypeSubscriptionCreated, subscription("sub1", "OrderPlaced"))
	log.add("a", decide.AggSubscription, "sub2", decide.TypeSubscriptionCreated, subscription("sub2"))
	log.add("a", decide.AggSubscription, "sub2", decide.TypeSubscriptionDisabled,
		decide.SubscriptionChange{ID: "sub2", At: "2026-01-02T05:00:00Z", Status: decide.SubscriptionDisabled, Reason: "410 Gone"})
	log.add("a", decide.AggSubscription, "sub3", decide.TypeSubscriptionCreated, subscription("sub3"))
	log.add("a", decide.AggSubscription, "sub3", decide.TypeSubscriptionDeleted, change("sub3"))
	log.add("b", decide.AggSubscription, "sub1", decide.TypeSubscriptionCreated, subscription("sub1", "OrderPlaced", "OrderShipped"))
	log.add("b", decide.AggSubscription, "sub2", decide.TypeSubscriptionCreated, subscription("sub2", []string{}...))
	log.add("a", "Order", "o1", "OrderShipped", map[string]any{})
}

// TestRegistriesStartFromTheirCopyOnDisk: registries started again on the
// disk they wrote read the log only after the sequence each holds there,
// and answer as registries replayed from the log's first event do, record
// for record (so every record kind goes through the disk and back
// unchanged); a record deleted after the disk held it stays deleted
// across the next start.
func TestRegistriesStartFromTheirCopyOnDisk(t *testing.T) {
	log := &eventLog{}
	registryEvents(log)
	disk := localstoretest.Open(t, "")
	_, stop := startRegistries(t, disk, log)
	stop()
	held := lastOfEach(log)

	log.add("a", decide.AggAgent, "ag1", decide.TypeAgentDeleted, change("ag1"))
	log.add("a", decide.AggAgent, "ag4", decide.TypeAgentRegistered, registration("ag4", "ChargeCustomer"))
	log.add("b", decide.AggAgent, "ag1", decide.TypeAgentPaused, change("ag1"))
	log.add("a", decide.AggSubscription, "sub1", decide.TypeSubscriptionDeleted, change("sub1"))
	log.add("a", decide.AggSubscription, "sub2", decide.TypeSubscriptionEnabled,
		decide.SubscriptionChange{ID: "sub2", At: "2026-01-02T06:00:00Z", Status: decide.SubscriptionActive})
	log.add("a", decide.AggService, "s3", decide.TypeServiceRegistered, registration("s3"))
	log.takeReads()
	again, stop := startRegistries(t, disk, log)
	checkReadsAfter(t, log.takeReads(), held)
	fresh, _ := startRegistries(t, localstoretest.Open(t, ""), log)
	sameRegistries(t, "started on the disk", again, fresh)
	for _, gone := range []struct {
		found bool
		what  string
	}{
		{has(again.Agents, "a", "ag1"), "agent ag1, deleted after the disk held it"},
		{has(again.Agents, "a", "ag3"), "agent ag3, deleted"},
		{has(again.Services, "a", "s2"), "service s2, deleted"},
		{has(again.Subscriptions, "a", "sub1"), "subscription sub1, deleted after the disk held it"},
		{has(again.Subscriptions, "a", "sub3"), "subscription sub3, deleted"},
	} {
		if gone.found {
			t.Errorf("%s is in the registry started on the disk", gone.what)
		}
	}
	if a, ok := again.Agents.Get("b", "ag1"); !ok || a.Status != decide.AgentPaused {
		t.Errorf("agent ag1 of b: %+v, %v; want it paused", a, ok)
	}

	// Once the disk holds the deletions, a start with nothing new in the
	// log reads nothing of it and finds them deleted.
	stop()
	startAgainReadingWhatIsNew(t, disk, log, "started on the disk again", fresh)
}

// has reports whether r has tenant's record id.
func has[T any](r *projection.Registry[T], tenant, id string) bool {
	_, ok := r.Get(tenant, id)
	return ok
}

// lastOfEach returns the sequence of the last event of each registry's in
// log, by aggregate type.
func lastOfEach(log *eventLog) map[string]uint64 {
	held := map[string]uint64{}
	for agg, filter := range registryFilters {
		held[agg] = log.lastOf(filter)
	}
	return held
}

// startAgainReadingWhatIsNew starts the registries on disk once more, with
// nothing new in log, and fails t unless each reads the log only after
// what the disk holds and they answer as fresh does.
func startAgainReadingWhatIsNew(t *testing.T, disk bus.Disk, log *eventLog, what string, fresh *projection.Registries) {
	t.Helper()
	held := lastOfEach(log)
	log.takeReads()
	again, _ := startRegistries(t, disk, log)
	checkReadsAfter(t, log.takeReads(), held)
	sameRegistries(t, what, again, fresh)
}

// checkReadsAfter fails t unless each registry read the log, and only
// after the sequence the disk held it at.
func checkReadsAfter(t *testing.T, reads []logRead, held map[string]uint64) {
	t.Helper()
	for agg, filter := range registryFilters {
		var froms []uint64
		for _, r := range reads {
			if r.filter == filter {
				froms = append(froms, r.from)
			}
		}
		if len(froms) == 0 || slices.Min(froms) != held[agg]+1 {
			t.Errorf("the %s registry read the log from %v; want from %d on, after what the disk held", agg, froms, held[agg]+1)
		}
	}
}

// TestRegistryReplaysTheLogWhenItsCopyDoesNotDecode: a record on disk that
// does not decode makes its registry start from the log's first event,
// answering as one replayed from there, and replace its copy on disk.
func TestRegistryReplaysTheLogWhenItsCopyDoesNotDecode(t *testing.T) {
	log := &eventLog{}
	registryEvents(log)
	disk := localstoretest.Open(t, "")
	first, stop := startRegistries(t, disk, log)
	stop()
	bad := projection.RegistryKey(first.Agents, "a", "ag2")
	if err := disk.Write([]bus.DiskWrite{{Key: bad, Val: []byte("\x00\x00\x00\x00\x00\x00\x00\x04{not json")}}); err != nil {
		t.Fatal(err)
	}
	log.takeReads()
	again, stop := startRegistries(t, disk, log)
	reads := log.takeReads()
	fresh, _ := startRegistries(t, localstoretest.Open(t, ""), log)
	sameRegistries(t, "started on a damaged disk", again, fresh)
	if len(reads) == 0 || reads[0].filter != registryFilters[decide.AggAgent] || reads[0].from != 1 {
		t.Errorf("the registries read the log %+v; want the agent registry's first read from 1", reads)
	}
	stop()
	startAgainReadingWhatIsNew(t, disk, log, "started on the disk written again", fresh)
}
