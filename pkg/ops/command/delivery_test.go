package command

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/agentbus/agentbus/pkg/decide"
	"github.com/agentbus/agentbus/pkg/errs"
	"github.com/agentbus/agentbus/pkg/ops/op"
)

// subs is a subscriptions registry of the ids given, for tenant "t".
type subs []string

func (s subs) Get(tenant, id string) (decide.Subscription, bool) {
	return decide.Subscription{ID: id}, tenant == "t" && slices.Contains(s, id)
}

// control records what delivery was asked to do.
type control struct {
	replayed  []string
	redeliver int
}

func (c *control) Waiting(context.Context, string, string) (uint64, error) { return 3, nil }
func (c *control) Redeliver(context.Context, string, string) error         { c.redeliver++; return nil }
func (c *control) Replay(_ context.Context, tenant, id string, after uint64) error {
	c.replayed = append(c.replayed, fmt.Sprintf("%s/%s@%d", tenant, id, after))
	return nil
}

// cursors are "c-<seq>" for tenant "t".
type cursors struct{}

func (cursors) Cursor(tenant string, _ bool, seq uint64) string { return fmt.Sprintf("c-%d", seq) }
func (cursors) CursorSeq(tenant string, _ bool, cursor string) (uint64, error) {
	var n uint64
	if cursor == "0" {
		return 0, nil
	}
	if _, err := fmt.Sscanf(cursor, "c-%d", &n); err != nil || tenant != "t" {
		return 0, errs.New(errs.CodeValidationFailed, "not a cursor")
	}
	return n, nil
}

// TestDeliveryActions: the delivery actions run on their own small ports
// (a registry lookup, delivery's control, the cursors): replay moves
// delivery to the cursor given (0 the start), answering the cursor;
// a body that says neither or both, or a cursor not of the tenant, is
// VALIDATION_FAILED and changes nothing; an unknown subscription is
// SUBSCRIPTION_NOT_FOUND; redeliver answers how many dead letters wait.
func TestDeliveryActions(t *testing.T) {
	t.Parallel()
	c := &control{}
	d := NewDelivery(DeliveryPorts{Subscriptions: subs{"s1"}, Control: c, Cursors: cursors{}})
	req := func(tenant, id, body string) *op.Request {
		return &op.Request{Tenant: tenant, Params: map[string][]string{"id": {id}}, Body: []byte(body)}
	}
	for _, tc := range []struct {
		name, tenant, id, body string
		code                   errs.Code
		after                  string
	}{
		{"from the start", "t", "s1", `{"after":0}`, "", "c-0"},
		{"after a cursor", "t", "s1", `{"after":"c-42"}`, "", "c-42"},
		{"neither", "t", "s1", `{}`, errs.CodeValidationFailed, ""},
		{"both", "t", "s1", `{"after":0,"since":"2026-01-01T00:00:00Z"}`, errs.CodeValidationFailed, ""},
		{"unknown member", "t", "s1", `{"before":0}`, errs.CodeValidationFailed, ""},
		{"another number", "t", "s1", `{"after":7}`, errs.CodeValidationFailed, ""},
		{"not a cursor", "t", "s1", `{"after":"x"}`, errs.CodeValidationFailed, ""},
		{"unknown subscription", "t", "s2", `{"after":0}`, errs.CodeSubscriptionNotFound, ""},
		{"another tenant's", "u", "s1", `{"after":0}`, errs.CodeSubscriptionNotFound, ""},
		{"a bad id", "t", "a b", `{"after":0}`, errs.CodeValidationFailed, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := len(c.replayed)
			res, err := d.Replay(context.Background(), req(tc.tenant, tc.id, tc.body))
			if tc.code != "" {
				if errs.CodeOf(err) != tc.code || len(c.replayed) != before {
					t.Fatalf("Replay: %v (replayed %v), want %s and nothing replayed", err, c.replayed, tc.code)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			body := res.Body.(map[string]any)
			if res.Outcome != op.Queued || body["after"] != tc.after || len(c.replayed) != before+1 ||
				!strings.HasSuffix(c.replayed[before], "@"+strings.TrimPrefix(tc.after, "c-")) {
				t.Fatalf("Replay: %+v, replayed %v", res, c.replayed)
			}
		})
	}
	res, err := d.Redeliver(context.Background(), req("t", "s1", ""))
	if err != nil || res.Outcome != op.Queued || res.Body.(map[string]any)["deadLetters"] != uint64(3) || c.redeliver != 1 {
		t.Fatalf("Redeliver: %+v %v (redelivered %d)", res, err, c.redeliver)
	}
	if _, err := d.Redeliver(context.Background(), req("t", "s2", "")); errs.CodeOf(err) != errs.CodeSubscriptionNotFound || c.redeliver != 1 {
		t.Fatalf("Redeliver of an unknown subscription: %v", err)
	}
}
