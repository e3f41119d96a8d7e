package app

import (
	"go/ast"
	"go/parser"
	"go/token"
	"strconv"
	"testing"

	"github.com/agentbus/agentbus/pkg/errs"
)

// TestKnownCodesAreErrsCodes: knownCodes holds exactly the codes pkg/errs
// declares, so a rejection with a code added there later is not answered
// as unknown.
func TestKnownCodesAreErrsCodes(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "../errs/errs.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	declared := map[errs.Code]bool{}
	ast.Inspect(f, func(n ast.Node) bool {
		vs, ok := n.(*ast.ValueSpec)
		if !ok || vs.Type == nil || len(vs.Values) != 1 {
			return true
		}
		if id, ok := vs.Type.(*ast.Ident); ok && id.Name == "Code" {
			if lit, ok := vs.Values[0].(*ast.BasicLit); ok {
				s, _ := strconv.Unquote(lit.Value)
				declared[errs.Code(s)] = true
			}
		}
		return true
	})
	if len(declared) == 0 {
		t.Fatal("no error code found in pkg/errs")
	}
	for c := range declared {
		if !knownCodes[c] {
			t.Errorf("knownCodes lacks %s", c)
		}
	}
	for c := range knownCodes {
		if !declared[c] {
			t.Errorf("knownCodes has %s, which pkg/errs does not declare", c)
		}
	}
}
