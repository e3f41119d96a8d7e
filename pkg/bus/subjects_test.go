package bus_test

import (
	"fmt"
	"testing"

	"github.com/agentbus/agentbus/pkg/bus"
)

func TestSubjectsCommandRoundTrip(t *testing.T) {
	t.Parallel()
	tests := []struct {
		prefix, tenant, typ, want string
	}{
		{"agentbus", "default", "PlaceOrder", "agentbus.cmd.default.PlaceOrder"},
		{"agentbus", "acme-eu-1", "RegisterAgent", "agentbus.cmd.acme-eu-1.RegisterAgent"},
		{"bus-2", "0", "A", "bus-2.cmd.0.A"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			t.Parallel()
			s := bus.Subjects{Prefix: tt.prefix}
			got := s.Command(tt.tenant, tt.typ)
			if got != tt.want {
				t.Fatalf("Command = %q, want %q", got, tt.want)
			}
			tenant, typ, ok := s.ParseCommand(got)
			if !ok || tenant != tt.tenant || typ != tt.typ {
				t.Errorf("ParseCommand(%q) = %q, %q, %v", got, tenant, typ, ok)
			}
			if !matches(s.AllCommands(), got) || !matches(s.CommandsOfType(tt.typ), got) {
				t.Errorf("%q not matched by %q / %q", got, s.AllCommands(), s.CommandsOfType(tt.typ))
			}
			if matches(s.CommandsOfType(tt.typ+"X"), got) {
				t.Errorf("%q matched by another type's filter", got)
			}
		})
	}
}

func TestSubjectsParseCommandRejects(t *testing.T) {
	t.Parallel()
	s := bus.Subjects{Prefix: "agentbus"}
	for _, subj := range []string{
		"", "agentbus", "agentbus.cmd", "agentbus.cmd.default", "agentbus.cmd.default.A.B",
		"other.cmd.default.A", "agentbus.evt.default.A", "agentbusx.cmd.default.A", "xagentbus.cmd.default.A",
		"agentbus.cmd.Default.A", "agentbus.cmd.-x.A", "agentbus.cmd.a_b.A", // not tenant ids
	} {
		if tenant, typ, ok := s.ParseCommand(subj); ok {
			t.Errorf("ParseCommand(%q) = %q, %q, true; want false", subj, tenant, typ)
		}
	}
}

func TestSubjectsEventRoundTrip(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name                              string
		root, tenant, aggType, aggID, typ string
		want                              string
		wantAggType, wantAggID            string
	}{
		{"aggregate in a shard", bus.RootEvents, "default", "order", "o-1", "OrderPlaced", "agentbus.evt.default.order.~08.OrderPlaced", "order", "~08"},
		{"registration", bus.RootEvents, "default", "agent", "a-1", "AgentRegistered", "agentbus.evt.default.agent.a-1.AgentRegistered", "agent", "a-1"},
		{"no aggregate", bus.RootEvents, "default", "", "", "NoteAdded", "agentbus.evt.default._._.NoteAdded", "_", "_"},
		{"no aggregate ignores id", bus.RootEvents, "t1", "", "stray", "CommandRejected", "agentbus.evt.t1._._.CommandRejected", "_", "_"},
		{"synthetic", bus.RootSynthetic, "acme", "agent", "a_1", "AgentRegistered", "agentbus.syn.acme.agent.a_1.AgentRegistered", "agent", "a_1"},
	}
	s := bus.Subjects{Prefix: "agentbus"}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := s.Event(tt.root, tt.tenant, tt.aggType, tt.aggID, tt.typ)
			if got != tt.want {
				t.Fatalf("Event = %q, want %q", got, tt.want)
			}
			tenant, aggType, aggID, typ, ok := s.ParseEvent(got)
			if !ok || tenant != tt.tenant || aggType != tt.wantAggType || aggID != tt.wantAggID || typ != tt.typ {
				t.Errorf("ParseEvent(%q) = %q %q %q %q %v", got, tenant, aggType, aggID, typ, ok)
			}
			if !matches(s.TenantEvents(tt.root, tt.tenant), got) {
				t.Errorf("TenantEvents does not match %q", got)
			}
			if !matches(s.EventsOfType(tt.root, tt.tenant, tt.typ), got) {
				t.Errorf("EventsOfType does not match %q", got)
			}
			if matches(s.TenantEvents(tt.root, tt.tenant+"x"), got) || matches(s.EventsOfType(tt.root, tt.tenant, tt.typ+"X"), got) {
				t.Errorf("another tenant's or type's filter matches %q", got)
			}
			if tt.root == bus.RootEvents && tt.aggType != "" {
				if !matches(s.Aggregate(tt.tenant, tt.aggType, tt.aggID), got) {
					t.Errorf("Aggregate does not match %q", got)
				}
				other := tt.aggID + "x"
				for bus.ShardOf(other) == bus.ShardOf(tt.aggID) {
					other += "x"
				}
				if matches(s.Aggregate(tt.tenant, tt.aggType, other), got) {
					t.Errorf("another shard's or aggregate's filter matches %q", got)
				}
			}
		})
	}
}

func TestSubjectsParseEventRejects(t *testing.T) {
	t.Parallel()
	s := bus.Subjects{Prefix: "agentbus"}
	for _, subj := range []string{
		"", "agentbus.evt.default.order.o-1", "agentbus.evt.default.order.o-1.A.B",
		"agentbus.cmd.default.order.o-1.A", "other.evt.default.order.o-1.A", "agentbusx.evt.default.order.o-1.A",
		"agentbus.evt.Default.order.o-1.A", "agentbus.syn.a_b.order.o-1.A", // not tenant ids
		"agentbus.evt.default.order.o~1.A", "agentbus.evt.default.order.~0g.A", "agentbus.evt.default.order.~0A.A",
		"agentbus.evt.default.order.~001.A",              // neither an aggregate id nor a shard
		"agentbus.evt.default.agent.~0a.AgentRegistered", // a registration's id is in the subject
	} {
		if _, _, _, _, ok := s.ParseEvent(subj); ok {
			t.Errorf("ParseEvent(%q) ok, want false", subj)
		}
	}
}

func TestShardOf(t *testing.T) {
	t.Parallel()
	// FNV-1a (32 bits) modulo 32, as the NATS contract states it, so that a
	// program in another language computes the same shard.
	for id, want := range map[string]string{"o-1": "~08", "ord-1": "~12", "o2": "~04", "o-contended": "~1f"} {
		if got := bus.ShardOf(id); got != want {
			t.Errorf("ShardOf(%q) = %q, want %q", id, got, want)
		}
	}
	seen := map[string]bool{}
	for i := range 10_000 {
		sh := bus.ShardOf(fmt.Sprintf("order-%d", i))
		if !bus.IsShard(sh) {
			t.Fatalf("ShardOf gave %q, which IsShard refuses", sh)
		}
		seen[sh] = true
	}
	if len(seen) != bus.AggregateShards {
		t.Errorf("10,000 ids fell in %d shards, want all %d", len(seen), bus.AggregateShards)
	}
}

func TestAggregateID(t *testing.T) {
	t.Parallel()
	h := func(id string) bus.Header { return bus.Header{bus.HeaderAggregateID: {id}} }
	for _, tt := range []struct {
		name, token string
		h           bus.Header
		want        string
	}{
		{"the id in the subject", "a-1", nil, "a-1"},
		{"no aggregate", "_", h("o-1"), ""},
		{"the header of its shard", "~08", h("o-1"), "o-1"},
		{"a header of another shard", "~09", h("o-1"), ""},
		{"no header", "~08", nil, ""},
		{"not an id", "~08", h("o 1"), ""},
	} {
		if got := bus.AggregateID(tt.token, tt.h); got != tt.want {
			t.Errorf("%s: AggregateID(%q) = %q, want %q", tt.name, tt.token, got, tt.want)
		}
	}
}

// matches reports whether a NATS subject filter matches subject.
func matches(filter, subject string) bool {
	f, s := split(filter), split(subject)
	for i, tok := range f {
		if tok == ">" {
			return len(s) > i
		}
		if i >= len(s) || (tok != "*" && tok != s[i]) {
			return false
		}
	}
	return len(f) == len(s)
}

func split(s string) []string {
	var out []string
	start := 0
	for i := 0; i <= len(s); i++ {
		if i == len(s) || s[i] == '.' {
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	return out
}

// TestTypedEventIsWhatATypeFilterMatches checks TypedEvent against the
// type filter itself: a subject has a type exactly when EventsOfType of
// its tenant and type matches it.
func TestTypedEventIsWhatATypeFilterMatches(t *testing.T) {
	s := bus.Subjects{Prefix: "agentbus"}
	for _, subj := range []string{
		"agentbus.evt.t1.Order.o-1.Placed",
		"agentbus.evt.t1._._.Placed",
		"agentbus.evt.T!.x.y.Odd",
		"agentbus.evt.t1.Order.Placed",
		"agentbus.evt.t1.Order.o-1.Placed.more",
		"agentbus.evt.t1",
		"agentbus.syn.t1.Order.o-1.Placed",
		"other.evt.t1.Order.o-1.Placed",
	} {
		tenant, typ, ok := s.TypedEvent(bus.RootEvents, subj)
		parts := split(subj)
		want := len(parts) == 6 && parts[0] == "agentbus" && parts[1] == "evt" &&
			matches(s.EventsOfType(bus.RootEvents, parts[2], parts[5]), subj)
		if ok != want || ok && (tenant != parts[2] || typ != parts[5]) {
			t.Errorf("TypedEvent(%q) = %q, %q, %v; want ok %v", subj, tenant, typ, ok, want)
		}
	}
}
