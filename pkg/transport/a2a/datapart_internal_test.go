package a2a

import "testing"

// TestDataPart: the one data part of a message is found as sent, in either
// binding's body; none, or more than one, is nil.
func TestDataPart(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, body string
		rpc        bool
		want       string
	}{
		{"rpc", `{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"parts":[{"text":"hi"},{"data":{"n": 1.50}}]}}}`, true, `{"n": 1.50}`},
		{"rest", `{"message":{"parts":[{"data":{"n":9007199254740993}}]}}`, false, `{"n":9007199254740993}`},
		{"rest ignores params", `{"params":"x","message":{"parts":[{"data":[1]}]}}`, false, `[1]`},
		{"rpc null data", `{"params":{"message":{"parts":[{"data":null}]}}}`, true, `null`},
		{"rpc reads params only", `{"message":{"parts":[{"data":{}}]}}`, true, ``},
		{"two data parts", `{"message":{"parts":[{"data":1},{"data":2}]}}`, false, ``},
		{"no data part", `{"message":{"parts":[{"text":"x"}]}}`, false, ``},
		{"parts not an array", `{"message":{"parts":{}}}`, false, ``},
		{"message not an object", `{"message":5}`, false, ``},
	} {
		if got := string(dataPart([]byte(tc.body), tc.rpc)); got != tc.want {
			t.Errorf("%s: dataPart = %q, want %q", tc.name, got, tc.want)
		}
	}
}
