package main

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/projection"
)

// TestReceiptOutcome holds the observer's quick receipt reading to what
// json.Unmarshal into project.Receipt says.
func TestReceiptOutcome(t *testing.T) {
	receipts := []projection.Receipt{
		{CorrelationID: "c1", Tenant: "default", Status: projection.StatusAccepted},
		{CorrelationID: "c2", Tenant: "default", Status: projection.StatusProcessed, Events: []uint64{7}},
		{CorrelationID: "c3", Tenant: "default", Status: projection.StatusProcessed, CommandSeq: 3, Events: []uint64{1, 2}},
		{CorrelationID: "c4", Tenant: "default", Status: projection.StatusRejected, Events: []uint64{9},
			Rejection: &projection.Rejection{Code: "X", Message: `"status":"processed","events":[1]`}},
		{CorrelationID: "c5", Tenant: "default", Status: projection.StatusRejected,
			Rejection: &projection.Rejection{Code: "X", Message: `"events":[5] "status":"processed"`}},
	}
	for _, r := range receipts {
		r.UpdatedAt = time.Unix(1700000000, 0).UTC()
		raw, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		status, hasEvents, ok := receiptOutcome(raw)
		if !ok || status != r.Status || hasEvents != (len(r.Events) > 0) {
			t.Errorf("%s: got %q %v %v, want %q %v", raw, status, hasEvents, ok, r.Status, len(r.Events) > 0)
		}
	}
	for _, bad := range []string{``, `{`, `{"status":1}`, `not json`} {
		if _, _, ok := receiptOutcome([]byte(bad)); ok {
			t.Errorf("%q: read as a receipt", bad)
		}
	}
}
