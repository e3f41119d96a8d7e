package projection

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/bus"
)

func TestReceiptPartRoundTrips(t *testing.T) {
	at := time.Date(2026, 11, 29, 8, 0, 0, 123456789, time.UTC)
	for _, r := range []Receipt{
		{Status: StatusAccepted},
		{Type: "PlaceOrder", CommandID: "c-1", Source: "shop", Time: "2026-11-29T08:00:00Z", CommandSeq: 42, Status: StatusAccepted, UpdatedAt: at},
		{Type: "PlaceOrder", CommandSeq: 1 << 40, Status: StatusProcessed, Events: []uint64{7, 8, 1 << 50}, UpdatedAt: at},
		{Status: StatusRejected, Rejection: &Rejection{Code: "INVALID", Message: strings.Repeat("é", 300)}, Events: []uint64{3}, UpdatedAt: at},
		{Status: StatusRejected, Rejection: &Rejection{}, UpdatedAt: time.Unix(0, -1).UTC()},
	} {
		raw := AppendReceiptPart(nil, &r)
		got := Receipt{CorrelationID: "kept", Tenant: "kept", Events: []uint64{99}, Rejection: &Rejection{Code: "stale"}}
		if err := ReadReceiptPart(raw, &got); err != nil {
			t.Fatalf("%+v: %v", r, err)
		}
		r.CorrelationID, r.Tenant = "kept", "kept" // the key's, not the value's
		if !reflect.DeepEqual(got, r) {
			t.Fatalf("read back\n%+v\nwrote\n%+v", got, r)
		}
	}
}

func TestReceiptPartRefusesWhatItDidNotWrite(t *testing.T) {
	r := Receipt{Type: "PlaceOrder", CommandID: "c-1", Status: StatusProcessed, Events: []uint64{1, 2},
		Rejection: &Rejection{Code: "X", Message: "m"}, UpdatedAt: time.Now()}
	raw := AppendReceiptPart(nil, &r)
	for n := range len(raw) {
		if err := ReadReceiptPart(raw[:n], &Receipt{}); !errors.Is(err, errReceiptCodec) {
			t.Fatalf("cut to %d of %d bytes: %v", n, len(raw), err)
		}
	}
	for name, bad := range map[string][]byte{
		"a byte past its end": append(AppendReceiptPart(nil, &r), 0),
		"another version":     append([]byte{receiptCodec + 1}, raw[1:]...),
		"JSON":                []byte(`{"correlationId":"c","status":"accepted"}`),
		"more events than bytes": func() []byte {
			b := AppendReceiptPart(nil, &Receipt{Status: StatusAccepted})
			return append(b[:len(b)-2], 0xff, 0xff, 0xff, 0x7f, 0)
		}(),
	} {
		if err := ReadReceiptPart(bad, &Receipt{}); !errors.Is(err, errReceiptCodec) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// FuzzReadReceipt holds ReadReceiptPart to refusing, never panicking on, any
// value, and to reading back what it accepts the same once written again.
func FuzzReadReceipt(f *testing.F) {
	f.Add(AppendReceiptPart(nil, &Receipt{Type: "T", Status: StatusRejected, Rejection: &Rejection{Code: "c"}, Events: []uint64{1, 5}, UpdatedAt: time.Unix(5, 0)}))
	f.Add([]byte{receiptCodec})
	f.Fuzz(func(t *testing.T, raw []byte) {
		var r Receipt
		if ReadReceiptPart(raw, &r) != nil {
			return
		}
		var again Receipt
		if err := ReadReceiptPart(AppendReceiptPart(nil, &r), &again); err != nil || !reflect.DeepEqual(again, r) {
			t.Fatalf("%+v read back as %+v (%v)", r, again, err)
		}
	})
}

// FuzzReadEventCopy holds ReadEventCopy to refusing, never panicking on,
// any value, and to reading back what it accepts the same once written
// again (but for the headers a read adds, which a copy leaves out).
func FuzzReadEventCopy(f *testing.F) {
	f.Add(AppendEventCopy(nil, &bus.Message{Subject: "agentbus.evt.a.Order.s1.Placed", Data: []byte(`{"id":"e"}`), Time: time.Unix(5, 6),
		Header: bus.Header{bus.HeaderCorrelationID: {"c"}, "Multi": {"x", ""}, "Nats-Sequence": {"9"}}}))
	f.Add([]byte{eventCopyCodec})
	f.Fuzz(func(t *testing.T, raw []byte) {
		m, err := ReadEventCopy(raw, 7)
		if err != nil {
			return
		}
		for k := range m.Header {
			if ReadHeader(k) {
				delete(m.Header, k)
			}
		}
		again, err := ReadEventCopy(AppendEventCopy(nil, m), 7)
		if err != nil || !reflect.DeepEqual(again, m) {
			t.Fatalf("%+v read back as %+v (%v)", m, again, err)
		}
	})
}
