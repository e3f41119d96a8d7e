package execute

import (
	"strconv"
	"testing"
)

func TestRecentKeepsTheNewest(t *testing.T) {
	r := newRecent[int](4, 0)
	for i := range 20 {
		r.put(strconv.Itoa(i), i, 0)
	}
	if n := r.len(); n > 8 {
		t.Fatalf("%d entries held, bound 8", n)
	}
	for i := 16; i < 20; i++ {
		if !r.has(strconv.Itoa(i)) {
			t.Errorf("entry %d, among the newest four, was dropped", i)
		}
	}
	if r.has("0") {
		t.Error("the oldest entry is still held")
	}
}

func TestRecentSizeAndRemove(t *testing.T) {
	r := newRecent[string](100, 10)
	r.put("a", "first", 4)
	r.put("a", "second", 4) // replaces: its size counts once
	if r.curSize != 4 {
		t.Fatalf("size %d after putting a twice, want 4", r.curSize)
	}
	r.put("b", "b", 4)
	r.put("c", "c", 4) // over 10: a new generation
	if r.curSize != 4 || !r.has("a") || !r.has("b") {
		t.Fatalf("size %d, a %v, b %v: want 4 and both kept in the previous generation", r.curSize, r.has("a"), r.has("b"))
	}
	if _, ok := r.remove("a", func(v string) bool { return v == "first" }); ok {
		t.Error("removed an entry the match refused")
	}
	if v, ok := r.remove("a", nil); !ok || v != "second" {
		t.Errorf("remove(a) = %q, %v", v, ok)
	}
	if _, ok := r.remove("c", nil); !ok || r.curSize != 0 {
		t.Errorf("after removing c the size is %d, want 0", r.curSize)
	}
}
