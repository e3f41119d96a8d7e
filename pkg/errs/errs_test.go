package errs

import (
	"go/ast"
	"go/parser"
	"go/token"
	"strconv"
	"testing"
)

// TestKnownHoldsEveryCode: codes holds exactly the codes declared here, so
// a rejection with a code added later is not answered as unknown.
func TestKnownHoldsEveryCode(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "errs.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	declared := map[Code]bool{}
	ast.Inspect(f, func(n ast.Node) bool {
		vs, ok := n.(*ast.ValueSpec)
		if !ok || vs.Type == nil || len(vs.Values) != 1 {
			return true
		}
		if id, ok := vs.Type.(*ast.Ident); ok && id.Name == "Code" {
			if lit, ok := vs.Values[0].(*ast.BasicLit); ok {
				s, _ := strconv.Unquote(lit.Value)
				declared[Code(s)] = true
			}
		}
		return true
	})
	if len(declared) == 0 {
		t.Fatal("no error code found in errs.go")
	}
	for c := range declared {
		if !c.Known() {
			t.Errorf("codes lacks %s", c)
		}
	}
	for _, c := range codes {
		if !declared[c] {
			t.Errorf("codes has %s, which is not declared", c)
		}
	}
	if len(codes) != len(declared) {
		t.Errorf("codes has %d entries for %d declared codes", len(codes), len(declared))
	}
}
