package e2e_test

import (
	"testing"
)

func TestPlaceOrderBecomesOrderPlaced(t *testing.T) {
	t.Parallel()
	s := start(t)
	r := postJSON(t, s.URL+"/commands", placeOrder("o-1"))
	if r.Status != 202 {
		t.Fatalf("submit: %d %s", r.Status, r.Body)
	}
	id := r.JSON(t)["id"].(string)
	if loc := r.Header.Get("Location"); loc != s.URL+"/traces/"+id {
		t.Fatalf("Location = %q", loc)
	}
	evs := eventsOf(t, s.URL, id, 1)
	if evs[0]["type"] != "OrderPlaced" {
		t.Fatalf("event: %v", evs[0])
	}
	r2 := postJSON(t, s.URL+"/commands", placeOrder("o-1"))
	id2 := r2.JSON(t)["id"].(string)
	evs = eventsOf(t, s.URL, id2, 1)
	if evs[0]["type"] != "CommandRejected" {
		t.Fatalf("second PlaceOrder of o-1: %v", evs[0])
	}
}
