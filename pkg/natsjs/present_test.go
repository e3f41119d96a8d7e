package natsjs_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/natsjs"
	"github.com/agentbus/agentbus/pkg/natsjs/natsjstest"
)

// TestMissing: Missing names, in the specs' order, each stream and bucket
// the server does not hold, and none once all are there; consumers are
// not its business.
func TestMissing(t *testing.T) {
	conn := natsjstest.Conn(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	specs := []natsjs.Spec{
		{Kind: "stream", Name: "T_ONE", Subjects: []string{"t.one.>"}, Storage: "file"},
		{Kind: "kv", Name: "T_BUCKET", Storage: "file", History: 1},
		{Kind: "stream", Name: "T_TWO", Subjects: []string{"t.two.>"}, Storage: "file"},
		{Kind: "consumer", Stream: "T_ONE", Name: "c"},
	}
	missing, err := conn.Missing(ctx, specs)
	if want := []string{"stream T_ONE", "bucket T_BUCKET", "stream T_TWO"}; err != nil || !slices.Equal(missing, want) {
		t.Fatalf("nothing applied: %q %v, want %q", missing, err, want)
	}
	if err := conn.Apply(ctx, specs[:3], nil); err != nil {
		t.Fatal(err)
	}
	if missing, err := conn.Missing(ctx, specs); err != nil || len(missing) != 0 {
		t.Fatalf("all applied: %q %v", missing, err)
	}
	if err := conn.JS.DeleteKeyValue(ctx, "T_BUCKET"); err != nil {
		t.Fatal(err)
	}
	if err := conn.JS.DeleteStream(ctx, "T_TWO"); err != nil {
		t.Fatal(err)
	}
	missing, err = conn.Missing(ctx, specs)
	if want := []string{"bucket T_BUCKET", "stream T_TWO"}; err != nil || !slices.Equal(missing, want) {
		t.Fatalf("two deleted: %q %v, want %q", missing, err, want)
	}
}
