package natsjs

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/errs"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// storeBucket is storeLog's server with a key-value bucket "T" (history
// 1), seen through agentbus's KV and through nats.go's.
func storeBucket(t testing.TB) (*Conn, *KV, jetstream.KeyValue) {
	t.Helper()
	conn, _ := storeLog(t)
	ctx := context.Background()
	ref, err := conn.JS.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "T", History: 1})
	if err != nil {
		t.Fatal(err)
	}
	k, err := conn.KV(ctx, "T")
	if err != nil {
		t.Fatal(err)
	}
	return conn, k, ref
}

// TestKVHotPathsAgreeWithNATSGo: Get, Create and Update, which skip
// nats.go's key-value layer on a plain bucket, answer as it does — missing
// keys, revisions, stale revisions, delete and purge markers, bad keys.
func TestKVHotPathsAgreeWithNATSGo(t *testing.T) {
	conn, k, ref := storeBucket(t)
	ctx := context.Background()
	if !k.plain || !k.direct {
		t.Fatalf("a plain bucket with direct gets is not read directly: plain %v direct %v", k.plain, k.direct)
	}
	same := func(key string) {
		t.Helper()
		val, rev, err := k.Get(ctx, key)
		e, refErr := ref.Get(ctx, key)
		if refErr != nil {
			if !errors.Is(err, errs.ErrNotFound) {
				t.Errorf("get %s: %q rev %d err %v; nats.go says %v", key, val, rev, err, refErr)
			}
			return
		}
		if err != nil || string(val) != string(e.Value()) || rev != e.Revision() {
			t.Errorf("get %s: %q rev %d err %v; nats.go says %q rev %d", key, val, rev, err, e.Value(), e.Revision())
		}
	}
	same("a.b")
	rev1, err := k.Create(ctx, "a.b", []byte("one"))
	if err != nil || rev1 == 0 {
		t.Fatalf("create: %d %v", rev1, err)
	}
	same("a.b")
	st, err := conn.JS.Stream(ctx, "KV_T")
	if err != nil {
		t.Fatal(err)
	}
	if raw, err := st.GetLastMsgForSubject(ctx, "$KV.T.a.b"); err != nil || raw.Header.Get(jetstream.ExpectedStreamHeader) != "" {
		t.Errorf("stored entry: headers %v (%v), want the ones nats.go writes", raw.Header, err)
	}
	if _, err := k.Create(ctx, "a.b", []byte("again")); !errors.Is(err, errs.ErrConflict) {
		t.Errorf("create of an existing key: %v, want ErrConflict", err)
	}
	rev2, err := k.Update(ctx, "a.b", []byte("two"), rev1)
	if err != nil || rev2 <= rev1 {
		t.Fatalf("update: %d %v", rev2, err)
	}
	same("a.b")
	if _, err := k.Update(ctx, "a.b", []byte("stale"), rev1); !errors.Is(err, errs.ErrConflict) {
		t.Errorf("update at a stale revision: %v, want ErrConflict", err)
	}
	if err := k.Delete(ctx, "a.b"); err != nil {
		t.Fatal(err)
	}
	same("a.b")
	if _, _, err := k.Get(ctx, "a.b"); !errors.Is(err, errs.ErrNotFound) {
		t.Errorf("get after delete: %v, want ErrNotFound", err)
	}
	if _, err := k.Create(ctx, "a.b", []byte("three")); err != nil {
		t.Errorf("create over a delete marker: %v", err)
	}
	same("a.b")
	if _, err := k.Create(ctx, "p", []byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := ref.Purge(ctx, "p"); err != nil {
		t.Fatal(err)
	}
	same("p")
	for _, bad := range []string{"", ".a", "a.", "a..b", "a b", "a*", "a>"} {
		if _, err := k.Create(ctx, bad, []byte("x")); err == nil {
			t.Errorf("create %q: accepted", bad)
		}
		if _, _, err := k.Get(ctx, bad); err == nil {
			t.Errorf("get %q: found", bad)
		}
	}
}

// TestKVWriteWithoutAnswerEnds: a receipt write whose answer never comes
// (lost in a failover) ends with ErrUnavailable within opTimeout, even
// under a context without deadline (a consumer's), instead of holding its
// worker — and every later message with the same key — for good.
func TestKVWriteWithoutAnswerEnds(t *testing.T) {
	conn, _ := storeLog(t)
	// A subscriber that takes the write and never answers, where a bucket's
	// stream would.
	sub, err := conn.NC.Subscribe("$KV.SILENT.>", func(*nats.Msg) {})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	k := &KV{nc: conn.NC, stream: "KV_SILENT", pre: "$KV.SILENT.", plain: true, direct: true}
	done := make(chan error, 1)
	start := time.Now()
	go func() {
		_, err := k.Create(context.Background(), "a", []byte("x"))
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, errs.ErrUnavailable) {
			t.Errorf("unanswered create: %v, want ErrUnavailable", err)
		}
		if d := time.Since(start); d < opTimeout/2 {
			t.Errorf("unanswered create gave up after %s, want about %s", d, opTimeout)
		}
	case <-time.After(3 * opTimeout):
		t.Fatal("an unanswered create is still waiting")
	}
}

// TestKVCreateLosingToAVanishedKeyIsAConflict: a create that conflicts and
// then finds no entry at all (the key went again, or a lagging replica
// answered the read) lost a race like any other: ErrConflict, which
// callers read and retry after, never ErrNotFound.
func TestKVCreateLosingToAVanishedKeyIsAConflict(t *testing.T) {
	conn, _ := storeLog(t)
	ctx := context.Background()
	for _, b := range []string{"T", "U"} {
		if _, err := conn.JS.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: b, History: 1}); err != nil {
			t.Fatal(err)
		}
	}
	k, err := conn.KV(ctx, "T")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := k.Create(ctx, "a.b", []byte("one")); err != nil {
		t.Fatal(err)
	}
	// Writes go to T, where the key exists; the read after the conflict
	// asks U's stream, which has no entry for it: what a replica that has
	// not seen the write yet answers.
	lagging := &KV{nc: conn.NC, stream: "KV_U", pre: k.pre, plain: true, direct: true}
	if _, err := lagging.Create(ctx, "a.b", []byte("two")); !errors.Is(err, errs.ErrConflict) {
		t.Errorf("create after a conflict with no entry to read: %v, want ErrConflict", err)
	}
}

// TestKVPutAsync: puts sent without waiting are stored in the order sent
// (the last of a key wins), after a put sent before them, and each Wait
// says so, as often as asked; a key the fast path does not take is put
// at once.
func TestKVPutAsync(t *testing.T) {
	_, k, ref := storeBucket(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := k.Put(ctx, "a", []byte("first")); err != nil {
		t.Fatal(err)
	}
	var sent []bus.PendingPut
	for i := range 100 {
		p, err := k.PutAsync("k"+strconv.Itoa(i%10), []byte(strconv.Itoa(i)))
		if err != nil {
			t.Fatal(err)
		}
		sent = append(sent, p)
	}
	last := uint64(1)
	for i, p := range sent {
		rev, err := p.Wait(ctx)
		if err != nil || rev <= last {
			t.Fatalf("put %d: revision %d after %d, %v", i, rev, last, err)
		}
		last = rev
		if again, err := p.Wait(ctx); again != rev || err != nil {
			t.Fatalf("put %d waited again: %d %v", i, again, err)
		}
	}
	for i := range 10 {
		e, err := ref.Get(ctx, "k"+strconv.Itoa(i))
		if err != nil || string(e.Value()) != strconv.Itoa(90+i) {
			t.Fatalf("k%d: %v %v, want the last put", i, e, err)
		}
	}
	p, err := k.PutAsync("not a key", []byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Wait(ctx); err == nil {
		t.Fatal("a key nats.go refuses was stored")
	}
}

// TestKVPutAsyncWithoutAnswer: a put no stream answers ends within the
// store's bound as "unavailable", and a Wait whose context ends first
// returns at once.
func TestKVPutAsyncWithoutAnswer(t *testing.T) {
	conn, _ := storeLog(t)
	sub, err := conn.NC.Subscribe("$KV.SILENT.>", func(*nats.Msg) {})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	k := &KV{nc: conn.NC, stream: "KV_SILENT", pre: "$KV.SILENT.", plain: true, direct: true}
	p, err := k.PutAsync("a", []byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := p.Wait(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("wait with a short context: %v", err)
	}
	start := time.Now()
	if _, err := p.Wait(context.Background()); !errors.Is(err, errs.ErrUnavailable) {
		t.Fatalf("unanswered put: %v, want ErrUnavailable", err)
	}
	if d := time.Since(start); d > 2*opTimeout {
		t.Fatalf("unanswered put ended after %s", d)
	}
}
