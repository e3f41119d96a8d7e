package projection

import (
	"context"
	"encoding/json"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/decide"
	"github.com/agentbus/agentbus/pkg/envelope"
	"github.com/agentbus/agentbus/pkg/text"
)

// Receipt statuses.
const (
	StatusAccepted  = "accepted"
	StatusProcessed = "processed"
	StatusRejected  = "rejected"
)

// Receipt is the correlation index entry of one command: what it was, where
// it is, and the sequences of the events it caused. It is projected from the
// command and event logs and can be rebuilt from them.
type Receipt struct {
	CorrelationID string     `json:"correlationId"`
	Tenant        string     `json:"tenant"`
	Type          string     `json:"type,omitempty"`
	CommandID     string     `json:"commandId,omitempty"`
	Source        string     `json:"source,omitempty"`
	Time          string     `json:"time,omitempty"`
	CommandSeq    uint64     `json:"commandSeq,omitempty"`
	Status        string     `json:"status"`
	Rejection     *Rejection `json:"rejection,omitempty"`
	Events        []uint64   `json:"events,omitempty"`
	UpdatedAt     time.Time  `json:"updatedAt"`
}

// Rejection says why a command was rejected.
type Rejection struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// Receipts is the correlation index: each command's receipt, read from
// the history on the replica's disk (History), which follows the command
// and event logs. It is read by submissions, queries, traces and the
// processor runtime. Safe for concurrent use.
type Receipts struct {
	history *History
	events  bus.Log
	// stuck, in Unix nanoseconds, is until when Current does not wait for
	// the history.
	stuck atomic.Int64
}

// NewReceipts returns the index kept by history. events, the event log
// history follows, serves Current.
func NewReceipts(history *History, events bus.Log) *Receipts {
	return &Receipts{history: history, events: events}
}

// Key is a command's key in the correlation index: its tenant and
// correlation id.
func Key(tenant, corr string) string { return tenant + "." + corr }

// Get returns the receipt of a command as the history holds it,
// errs.ErrNotFound, or errs.ErrUnavailable while the history catches up
// with the logs at the start.
func (x *Receipts) Get(_ context.Context, tenant, corr string) (*Receipt, error) {
	return x.history.Get(tenant, corr)
}

// InHistory reports whether the history holds a receipt of (tenant,
// corr): whether the command was accepted before (History.Accepted).
func (x *Receipts) InHistory(tenant, corr string) (bool, error) {
	return x.history.Accepted(tenant, corr)
}

// Processed reports whether the history lists events of (tenant, corr)
// (History.Processed).
func (x *Receipts) Processed(tenant, corr string) (bool, error) {
	return x.history.Processed(tenant, corr)
}

// HistoryCurrent reports whether the history holds the command log up to
// within maxLag (History.Current).
func (x *Receipts) HistoryCurrent(maxLag time.Duration) bool { return x.history.Current(maxLag) }

// Appended tells the history that the command log holds a command at seq
// (History.Appended).
func (x *Receipts) Appended(seq uint64) {
	if x != nil {
		x.history.Appended(seq)
	}
}

// commandChange returns the change a stored command makes to its
// receipt, and whether it makes one.
func commandChange(subj bus.Subjects, m *bus.Message) (tenant, corr string, change func(*Receipt) bool, ok bool) {
	tenant, typ, ok := subj.ParseCommand(m.Subject)
	env := envelope.ReadLoose(m.Data)
	corr = env.CorrelationID(tenant) // as the processor gives it (decide.ReadEnvelope)
	if !ok || corr == "" {
		return "", "", nil, false
	}
	if _, err := time.Parse(time.RFC3339Nano, env.Time); err != nil || len(env.Time) > maxTimeLen {
		env.Time = "" // the receipt keeps only a time the envelope could have
	}
	return tenant, corr, func(r *Receipt) bool {
		if r.CommandID != "" {
			// Projected already: this message (a redelivery), or another
			// copy (same source and id), which stays the command.
			return false
		}
		// A sequence an event's header gave first is the processor's word
		// (an external one may have none, or a wrong one); the command
		// log's own message is the command.
		r.Type, r.CommandID, r.Source, r.Time, r.CommandSeq = typ, env.ID, env.Source, env.Time, m.Seq
		return true
	}, true
}

// eventChange returns the change a stored event makes to its command's
// receipt, and whether it makes one.
func eventChange(subj bus.Subjects, m *bus.Message) (tenant, corr string, change func(*Receipt) bool, ok bool) {
	corr = decide.CorrelationOf(m)
	tenant, _, _, typ, ok := subj.ParseEvent(m.Subject)
	if !ok || corr == "" {
		return "", "", nil, false
	}
	var rej *Rejection
	if typ == decide.TypeCommandRejected {
		var env struct {
			Data Rejection `json:"data"`
		}
		_ = json.Unmarshal(m.Data, &env)
		rej = &Rejection{Code: text.Cut(env.Data.Code, maxRejectionCode), Message: text.Cut(env.Data.Message, MaxRejectionMessage)}
	}
	cmdSeq, _ := strconv.ParseUint(m.Header.Get(bus.HeaderCommandSeq), 10, 64)
	cmdType := m.Header.Get(bus.HeaderCommandType)
	if !envelope.ValidType(cmdType) {
		cmdType = "" // a header from an internal publisher is input like any other
	}
	return tenant, corr, func(r *Receipt) bool {
		i, found := slices.BinarySearch(r.Events, m.Seq)
		if found {
			return false // projected before (a redelivery): all below is there
		}
		if r.CommandSeq == 0 {
			r.CommandSeq = cmdSeq
		}
		if r.Type == "" {
			r.Type = cmdType
		}
		if len(r.Events) < MaxReceiptEvents {
			r.Events = slices.Insert(r.Events, i, m.Seq)
		}
		if rej != nil {
			r.Status, r.Rejection = StatusRejected, rej
		} else if r.Status != StatusRejected {
			r.Status = StatusProcessed
		}
		return true
	}, true
}

// What a receipt copies from messages anyone may publish is bounded, so
// that a receipt stays far below any maximum payload.
const (
	// MaxReceiptEvents bounds the events a receipt lists; GET
	// /events?correlationId= and traces read no further.
	MaxReceiptEvents    = 10_000
	maxRejectionCode    = 64
	MaxRejectionMessage = 2048
	maxTimeLen          = 64
)
