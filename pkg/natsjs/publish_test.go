package natsjs

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestReadPubAck(t *testing.T) {
	tests := []struct {
		in       string
		seq      uint64
		dup, ok  bool
		fallback bool // must be left to encoding/json
		other    bool // another stream's answer: read when any stream is expected
	}{
		{in: `{"stream":"S","seq":1}`, seq: 1, ok: true},
		{in: `{"stream":"S","seq":18446744073709}`, seq: 18446744073709, ok: true},
		{in: `{"stream":"S","seq":42,"duplicate": true}`, seq: 42, dup: true, ok: true},
		{in: `{"stream":"S","seq":42,"duplicate":true}`, seq: 42, dup: true, ok: true},
		{in: `{"stream":"S","seq":42,"duplicate":false}`, fallback: true},
		{in: `{"stream":"S","seq":42,"domain":"hub"}`, fallback: true},
		{in: `{"stream":"T","seq":1}`, fallback: true, other: true},
		{in: `{"stream":"SS","seq":1}`, fallback: true, other: true},
		{in: `{"stream":"S","seq":}`, fallback: true},
		{in: `{"stream":"S","seq":01}`, fallback: true},
		{in: `{"stream":"S","seq":-1}`, fallback: true},
		{in: `{"stream":"S","seq":99999999999999999999}`, fallback: true},
		{in: `{"stream":"S","seq":1} `, fallback: true},
		{in: `{"error":{"code":400,"err_code":10071,"description":"wrong last sequence: 5"},"stream":"S","seq":0}`, fallback: true},
		{in: ``, fallback: true},
	}
	for _, tt := range tests {
		seq, dup, ok := readPubAck([]byte(tt.in), "S")
		// Any stream name is taken when none is expected.
		if anySeq, anyDup, anyOK := readPubAck([]byte(strings.Replace(tt.in, `"S"`, `"KV_X"`, 1)), ""); !tt.other && (anyOK != ok || anySeq != seq || anyDup != dup) {
			t.Errorf("%s under any stream: %d %v %v, want %d %v %v", tt.in, anySeq, anyDup, anyOK, seq, dup, ok)
		}
		if tt.fallback {
			if ok {
				t.Errorf("%s: read as %d %v, want it left to encoding/json", tt.in, seq, dup)
			}
			continue
		}
		if !ok || seq != tt.seq || dup != tt.dup {
			t.Errorf("%s: got %d %v %v, want %d %v", tt.in, seq, dup, ok, tt.seq, tt.dup)
		}
		// What it reads is what encoding/json reads.
		var ack struct {
			Seq       uint64 `json:"seq"`
			Duplicate bool   `json:"duplicate"`
		}
		if err := json.Unmarshal([]byte(tt.in), &ack); err != nil || ack.Seq != seq || ack.Duplicate != dup {
			t.Errorf("%s: encoding/json reads %+v (%v)", tt.in, ack, err)
		}
	}
}
