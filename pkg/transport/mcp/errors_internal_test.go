package mcp

import (
	"testing"

	"github.com/agentbus/agentbus/pkg/errs"
)

// TestEveryCodeHasAnRPCCode: the JSON-RPC table covers every error code.
func TestEveryCodeHasAnRPCCode(t *testing.T) {
	t.Parallel()
	for _, c := range errs.Codes() {
		if _, ok := rpcCodeOf[c]; !ok {
			t.Errorf("%s has no JSON-RPC code", c)
		}
	}
}
