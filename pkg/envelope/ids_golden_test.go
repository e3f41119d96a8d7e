package envelope

import "testing"

// TestIDsAreStable pins derived ids to literal values: they are stored
// (Nats-Msg-Id, receipts, event ids), so a change in how they are derived
// would break deduplication and lookups across an upgrade while every test
// that computes its expectations with the same functions still passed. The
// first pair is the trace shown in docs/registries.md.
func TestIDsAreStable(t *testing.T) {
	for _, c := range []struct{ got, want string }{
		{CorrelationID("default", "ops-console", "reg-1"), "f0f40218-2437-521d-85f4-814998d4851b"},
		{EventID("f0f40218-2437-521d-85f4-814998d4851b", 0, "AgentRegistered"), "eba84ebf-8056-5ba8-a300-1b7bb152af3b"},
		{CorrelationID("acme", "a/b", "x_1"), "3dcae903-b048-59a2-af04-c47dd8a63815"},
		{EventID("f0f40218-2437-521d-85f4-814998d4851b", 2, "OrderPlaced"), "13fa35aa-13d9-5096-ba84-f6c1b0a7ca8e"},
	} {
		if c.got != c.want {
			t.Errorf("derived id %s, want %s", c.got, c.want)
		}
	}
}
