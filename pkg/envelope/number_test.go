package envelope

import (
	"reflect"
	"strings"
	"testing"

	"github.com/agentbus/agentbus/pkg/errs"
)

func TestExactNumber(t *testing.T) {
	for _, c := range []struct {
		num  string
		want bool
	}{
		{"0", true}, {"-0", true}, {"0e999999999999999999999", true}, {"1", true}, {"-1", true},
		{"1.0", true}, {"1E0", true}, {"1e3", true}, {"0.1", true}, {"-12.5e-3", true},
		{"9007199254740992", true},                               // 2^53
		{"-9007199254740992", true},                              // -2^53
		{"9007199254740993", false},                              // 2^53+1 reads as 2^53
		{"123456789012345678901234567890123456789012345", false}, // 45 digits
		{"123456789012345", true},                                // 15 digits
		{"0.1000000000000000055511151231257827", false},
		{"6.022e23", true}, {"1.7976931348623157e308", true}, {"-1.7976931348623157e308", true},
		{"1e400", false}, {"-1e400", false}, {"1.8e308", false},
		{"1e-400", false}, {"4.9e-324", false}, {"5e-324", true}, {"2.2250738585072014e-308", true},
		{"1e99999999999999999999", false}, {"1e-99999999999999999999", false},
		{"100000000000000000000", true}, // 1e20, written out: one significant digit
	} {
		if got := ExactNumber(c.num); got != c.want {
			t.Errorf("ExactNumber(%s) = %v, want %v", c.num, got, c.want)
		}
	}
}

func TestDecodeDataRefusesWhatTheValidatorAndAReaderWouldReadApart(t *testing.T) {
	for _, c := range []struct {
		data string
		want []errs.Violation
	}{
		{`{"a":1,"b":[1,2.5,{"c":"x"}]}`, nil},
		{`{"a":1,"a":2}`, []errs.Violation{{Path: "$.data.a", Message: "property appears more than once"}}},
		{`{"x":{"y":[{"k":1,"k":2}]}}`, []errs.Violation{{Path: "$.data.x.y.0.k", Message: "property appears more than once"}}},
		{`{"a":{"b":1},"a":{"b":1,"b":2}}`, []errs.Violation{
			{Path: "$.data.a", Message: "property appears more than once"},
			{Path: "$.data.a.b", Message: "property appears more than once"}}},
		{`{"qty":1e400}`, []errs.Violation{{Path: "$.data.qty", Message: NumberProblem}}},
		{`{"q":[1,123456789012345678901234567890123456789012345]}`, []errs.Violation{{Path: "$.data.q.1", Message: NumberProblem}}},
	} {
		doc, got, ok := DecodeData([]byte(c.data), "$.data")
		if !ok {
			t.Fatalf("%s: not decoded", c.data)
		}
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: problems %v, want %v", c.data, got, c.want)
		}
		if (doc == nil) != (len(c.want) > 0) {
			t.Errorf("%s: doc %v with %d problems", c.data, doc, len(got))
		}
	}
	long := strings.Repeat("é", 100)
	_, got, _ := DecodeData([]byte(`{"`+long+`":1,"`+long+`":2}`), "$")
	if len(got) != 1 || len(got[0].Path) > 2+maxSegmentLen+len("…") || !strings.HasSuffix(got[0].Path, "é…") {
		t.Errorf("a long name is not cut on a character boundary: %q", got)
	}
	if v := CheckData([]byte(`{"a":`), "$.data"); len(v) != 1 || v[0].Path != "$.data" {
		t.Errorf("invalid JSON: %v", v)
	}
}

// FuzzDecodeData: DecodeData decodes what DecodeValue does, and refuses
// only what breaks its rules.
func FuzzDecodeData(f *testing.F) {
	for _, s := range valueSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		want, wantOK := DecodeValue(data)
		got, problems, ok := DecodeData(data, "$")
		if ok != wantOK {
			t.Fatalf("%q: ok %v, DecodeValue %v", data, ok, wantOK)
		}
		if ok && len(problems) == 0 && !reflect.DeepEqual(got, want) {
			t.Fatalf("%q: decoded as %#v; DecodeValue: %#v", data, got, want)
		}
	})
}
