package natsjs_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/natsjs"
	"github.com/agentbus/agentbus/pkg/natsjs/natsjstest"
)

// TestDropFormer: DropFormer removes the consumers and buckets it names
// that exist, says which, leaves everything else, and is a no-op the
// second time.
func TestDropFormer(t *testing.T) {
	conn := natsjstest.Conn(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	specs := []natsjs.Spec{
		{Kind: "stream", Name: "T_ONE", Subjects: []string{"t.one.>"}, Storage: "file"},
		{Kind: "kv", Name: "T_OLD", Storage: "file", History: 1},
		{Kind: "kv", Name: "T_KEPT", Storage: "file", History: 1},
		{Kind: "consumer", Stream: "T_ONE", Name: "old", FilterSubjects: []string{"t.one.>"}},
		{Kind: "consumer", Stream: "T_ONE", Name: "kept", FilterSubjects: []string{"t.one.>"}},
	}
	if err := conn.Apply(ctx, specs, nil); err != nil {
		t.Fatal(err)
	}
	former := natsjs.Former{
		Consumers: map[string][]string{"T_ONE": {"old", "absent"}, "T_NONE": {"old"}},
		Buckets:   []string{"T_OLD", "T_ABSENT"},
	}
	dropped, err := conn.DropFormer(ctx, former)
	if want := []string{"T_ONE/old", "T_OLD"}; err != nil || !slices.Equal(dropped, want) {
		t.Fatalf("dropped %q %v, want %q", dropped, err, want)
	}
	if missing, err := conn.Missing(ctx, specs); err != nil || !slices.Equal(missing, []string{"bucket T_OLD"}) {
		t.Errorf("after the drop, missing %q %v, want only bucket T_OLD", missing, err)
	}
	if _, err := conn.JS.Consumer(ctx, "T_ONE", "old"); err == nil {
		t.Error("the former consumer is still there")
	}
	if _, err := conn.JS.Consumer(ctx, "T_ONE", "kept"); err != nil {
		t.Errorf("the other consumer: %v", err)
	}
	if dropped, err := conn.DropFormer(ctx, former); err != nil || len(dropped) != 0 {
		t.Errorf("a second drop: %q %v, want nothing", dropped, err)
	}
}
