package decide

import (
	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/envelope"
)

// Reading stored messages. The command and event logs take what any NATS
// publisher with access sends, so nothing read here is trusted: a
// correlation id is always the one a command's tenant, source and id
// derive, never a header's word alone.

// StoredHead reads what the subject of a stored command says: tenant, type
// and sequence, with the correlation header when it is a valid id (only a
// hint: ReadEnvelope replaces it with the id the envelope derives). ok is
// false for a subject that is not a command's.
func StoredHead(s bus.Subjects, m *bus.Message) (Command, bool) {
	tenant, typ, ok := s.ParseCommand(m.Subject)
	if !ok {
		return Command{}, false
	}
	return Command{Tenant: tenant, CorrelationID: CorrelationOf(m), Type: typ, Seq: m.Seq}, true
}

// ReadEnvelope decodes a stored command's envelope into cmd and returns
// what makes it invalid. The command's correlation id is the one its
// tenant, source and id derive (as POST /commands derives it, and the
// receipts projection for its receipt), even when the envelope is invalid,
// or "" when they cannot: never its Agentbus-Correlation-Id header, in
// which a publisher could name another command's — another tenant's — id
// and have this command's outcome land on it.
func ReadEnvelope(cmd *Command, raw []byte) error {
	env, err := envelope.Decode(raw, envelope.Command)
	if err == nil {
		cmd.Envelope = env
		cmd.CorrelationID = envelope.CorrelationID(cmd.Tenant, env.Source, env.ID)
	} else {
		cmd.CorrelationID = envelope.ReadLoose(raw).CorrelationID(cmd.Tenant)
	}
	return err
}

// StoredCommand reads m, a message of the command log, as the command corr
// of tenant: false unless it is on that tenant's subject and its envelope
// derives corr (a header or another message may name any sequence).
func StoredCommand(s bus.Subjects, m *bus.Message, tenant, corr string) (envelope.Loose, bool) {
	env := envelope.ReadLoose(m.Data)
	t, _, ok := s.ParseCommand(m.Subject)
	return env, ok && t == tenant && env.CorrelationID(tenant) == corr
}

// CorrelationOf returns a message's correlation header when it is a valid
// id (as agentbus writes it), else "": a header from an internal publisher
// is input like any other.
func CorrelationOf(m *bus.Message) string {
	if c := m.Header.Get(bus.HeaderCorrelationID); envelope.ValidTokenID(c) {
		return c
	}
	return ""
}

// CorrelationKey orders deliveries by correlation id: messages of one
// command are handled in order, different commands in parallel.
func CorrelationKey(m *bus.Message) string {
	if c := m.Header.Get(bus.HeaderCorrelationID); c != "" {
		return c
	}
	return m.Subject
}
