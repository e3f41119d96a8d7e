package abuse_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/auth"
	"github.com/agentbus/agentbus/pkg/server"
	"github.com/agentbus/agentbus/pkg/settings"
	"github.com/agentbus/agentbus/test/testkit"
	"github.com/nats-io/nats.go/jetstream"
)

// Helpers of the read-flood tests (prefix reads).

// readsEvents is the size of the seeded event log of the flood test and
// the benchmark.
var readsEvents = func() int {
	if v, _ := strconv.Atoi(os.Getenv("READS_N")); v > 0 {
		return v
	}
	return 30000
}()

// readsType spreads the seeded events over 25 types: Dense0-Dense4 and
// Other5-Other9 take almost all of them in turn, and Sparse0-Sparse14
// have a couple each, far apart.
func readsType(i int) string {
	if i%1000 == 7 {
		return "Sparse" + strconv.Itoa(i/1000%15)
	}
	if d := i % 10; d < 5 {
		return "Dense" + strconv.Itoa(d)
	}
	return "Other" + strconv.Itoa(i%10)
}

// readsTwentyTypes is the twenty types of a page filtered by many: the
// five dense and the fifteen sparse ones.
func readsTwentyTypes() []string {
	var types []string
	for i := range 5 {
		types = append(types, "Dense"+strconv.Itoa(i))
	}
	for i := range 15 {
		types = append(types, "Sparse"+strconv.Itoa(i))
	}
	return types
}

const readsBootstrap = "bootstrap-key-for-abuse-tests-0123456789"

// readsLog records what agentbus logs at warning level and above, and
// passes it on to the test logger.
type readsLog struct {
	mu    sync.Mutex
	lines []string
	next  slog.Handler
}

func (l *readsLog) Enabled(ctx context.Context, lv slog.Level) bool {
	return lv >= slog.LevelWarn || l.next.Enabled(ctx, lv)
}

func (l *readsLog) Handle(ctx context.Context, r slog.Record) error {
	if r.Level >= slog.LevelWarn {
		var b strings.Builder
		b.WriteString(r.Level.String() + " " + r.Message)
		r.Attrs(func(a slog.Attr) bool {
			fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
			return true
		})
		l.mu.Lock()
		l.lines = append(l.lines, b.String())
		l.mu.Unlock()
	}
	if l.next.Enabled(ctx, r.Level) {
		return l.next.Handle(ctx, r)
	}
	return nil
}

func (l *readsLog) WithAttrs(as []slog.Attr) slog.Handler {
	return &readsAttrs{l: l, attrs: as}
}
func (l *readsLog) WithGroup(string) slog.Handler { return l }

// readsAttrs is a readsLog with attributes added.
type readsAttrs struct {
	l     *readsLog
	attrs []slog.Attr
}

func (a *readsAttrs) Enabled(ctx context.Context, lv slog.Level) bool { return a.l.Enabled(ctx, lv) }
func (a *readsAttrs) Handle(ctx context.Context, r slog.Record) error {
	r.AddAttrs(a.attrs...)
	return a.l.Handle(ctx, r)
}
func (a *readsAttrs) WithAttrs(as []slog.Attr) slog.Handler {
	return &readsAttrs{l: a.l, attrs: append(slices.Clone(a.attrs), as...)}
}
func (a *readsAttrs) WithGroup(string) slog.Handler { return a }

// matching returns the recorded lines containing any of words.
func (l *readsLog) matching(words ...string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, line := range l.lines {
		for _, w := range words {
			if strings.Contains(line, w) {
				out = append(out, line)
				break
			}
		}
	}
	return out
}

// readsStart runs agentbus with API keys in a header, the test bootstrap
// key and a request rate no flood here reaches (the floods stay under
// their rate limit, as in the attack), then applies mutate. It returns
// the server and the record of its warnings.
func readsStart(t testing.TB, mutate ...func(*settings.Config)) (*server.Server, *readsLog) {
	t.Helper()
	rec := &readsLog{next: slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})}
	s := testkit.AgentbusWithLogger(t, slog.New(rec), append([]func(*settings.Config){testkit.NoNATSPort, func(c *settings.Config) {
		c.Auth.Type = "apikey-header"
		c.Auth.BootstrapKey = readsBootstrap
		c.Limits.Rate = settings.Rate{PerSecond: 1e6, Burst: 1e6}
	}}, mutate...)...)
	return s, rec
}

// readsKey creates an API key of the default tenant with scopes and waits
// until s takes it.
func readsKey(t testing.TB, s *server.Server, scopes ...auth.Scope) string {
	t.Helper()
	key := testkit.Key(t, s, []string{"default"}, scopes...)
	testkit.Eventually(t, "the new key is taken", func() bool {
		st, _, _, err := readsCall(http.DefaultClient, http.MethodGet, s.URL+"/events?limit=1", key, nil)
		return err == nil && st == http.StatusOK
	})
	return key
}

// readsCall sends a request with the API key and returns the status, the
// Retry-After header and the body; an error only when no answer came.
func readsCall(c *http.Client, method, url, key string, body []byte) (int, string, []byte, error) {
	ct := ""
	if body != nil {
		ct = "application/json"
	}
	st, h, b, err := testkit.Send(c, method, url, ct, body, auth.DefaultHeaderScheme, key)
	return st, h.Get("Retry-After"), b, err
}

// readsSeed stores n events of the default tenant straight on the event
// stream, each on an aggregate of its own (as orders are): event i, with
// id seed-i, has type typeOf(i). It returns the stream's last sequence.
func readsSeed(t testing.TB, s *server.Server, n int, typeOf func(i int) string) uint64 {
	t.Helper()
	return readsSeedFrom(t, s, 0, n, typeOf)
}

// readsSeedFrom is readsSeed for events from to from+n-1.
func readsSeedFrom(t testing.TB, s *server.Server, from, n int, typeOf func(i int) string) uint64 {
	t.Helper()
	nc, err := s.Conn.Dial("abuse-seed")
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(4096))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for i := from; i < from+n; i++ {
		if i%2000 == 0 { // well under the publisher's limit of messages awaiting their answer
			select {
			case <-js.PublishAsyncComplete():
			case <-ctx.Done():
				t.Fatal("seeding did not finish")
			}
		}
		typ := typeOf(i)
		env := fmt.Sprintf(`{"specversion":"1.0","id":"seed-%d","source":"abuse-seed","type":%q,`+
			`"datacontenttype":"application/json","time":"2026-01-01T12:00:00Z","data":{"orderId":"o-%d","customer":"ada","n":%d}}`, i, typ, i, i)
		if _, err := js.PublishAsync(fmt.Sprintf("agentbus.evt.default.Order.o-%d.%s", i, typ), []byte(env)); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-ctx.Done():
		t.Fatal("seeding did not finish")
	}
	info, err := js.Stream(ctx, "AGENTBUS_EVENTS")
	if err != nil {
		t.Fatal(err)
	}
	last := info.CachedInfo().State.LastSeq
	// Reads are measured once the type index (when kept) holds every event, as it
	// does a moment after each is stored, and agentbus's other followers
	// of the log have read the seeded events: the process's CPU time
	// grows by under a tenth of the wall clock twice in a row.
	for quiet := 0; s.TypeIndex != nil && s.TypeIndex.Through() < last || quiet < 2; {
		cpu := processCPU(t)
		select {
		case <-time.After(100 * time.Millisecond):
		case <-ctx.Done():
			t.Fatalf("the type index did not reach sequence %d, or agentbus was still busy", last)
		}
		if processCPU(t)-cpu < 10*time.Millisecond {
			quiet++
		} else {
			quiet = 0
		}
	}
	return last
}

// readsPlaceOrder is a PlaceOrder command envelope for order id.
func readsPlaceOrder(id string) []byte {
	b, _ := json.Marshal(map[string]any{
		"specversion": "1.0", "id": "cmd-" + id, "source": "abuse-reads", "type": "PlaceOrder",
		"datacontenttype": "application/json", "dataschema": "place-order/1.0", "time": "2026-01-01T12:00:00Z",
		"data": map[string]any{"orderId": id, "customer": "ada", "items": []any{map[string]any{"sku": "tea", "quantity": 1}}},
	})
	return b
}

// readsLatencies collects request durations; safe for concurrent use.
type readsLatencies struct {
	mu sync.Mutex
	d  []time.Duration
}

func (l *readsLatencies) add(d time.Duration) {
	l.mu.Lock()
	l.d = append(l.d, d)
	l.mu.Unlock()
}

// quantile returns the q-quantile (0..1) of the durations, 0 when none.
func (l *readsLatencies) quantile(q float64) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.d) == 0 {
		return 0
	}
	s := slices.Clone(l.d)
	slices.Sort(s)
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

func (l *readsLatencies) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.d)
}

// readsStatuses counts answers by status; safe for concurrent use.
type readsStatuses struct {
	mu sync.Mutex
	n  map[int]int
	// noRetryAfter counts 429 and 503 answers without Retry-After.
	noRetryAfter int
	errors       int
}

func (s *readsStatuses) add(status int, retryAfter string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.n == nil {
		s.n = map[int]int{}
	}
	if err != nil {
		s.errors++
		return
	}
	s.n[status]++
	if (status == 429 || status == 503) && retryAfter == "" {
		s.noRetryAfter++
	}
}

func (s *readsStatuses) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return fmt.Sprintf("%v, %d without an answer", s.n, s.errors)
}

func (s *readsStatuses) get(status int) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n[status]
}

// failed counts answers of 500 and over, and requests without an answer.
func (s *readsStatuses) failed() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.errors
	for st, c := range s.n {
		if st >= 500 {
			n += c
		}
	}
	return n
}

// readsNext returns the next cursor of a page of events without decoding
// it, and whether the page held any event.
func readsNext(page []byte) (string, bool) {
	i := bytes.LastIndex(page, []byte(`"next":"`))
	if i < 0 {
		return "", false
	}
	next, _, _ := strings.Cut(string(page[i+len(`"next":"`):]), `"`)
	return next, !bytes.HasPrefix(page, []byte(`{"events":[]`))
}
