package settings

import (
	"math"
	"reflect"
	"strings"

	"github.com/agentbus/agentbus/pkg/settings/strict"
)

// allowedNumbers returns what Validate says the numeric setting at key
// ("limits.pageMax") must be — "must be 1 to 1024" — found by giving it,
// in the default configuration, the lowest and then the highest value its
// type holds; "" when key is no numeric setting or Validate takes both.
func allowedNumbers(key string) string {
	for _, low := range []bool{true, false} {
		c := Default()
		f := reflect.ValueOf(&c).Elem()
		for name := range strings.SplitSeq(key, ".") {
			if f.Kind() != reflect.Struct {
				return ""
			}
			sf, ok := strict.Field(f.Type(), name)
			if !ok {
				return ""
			}
			f = f.FieldByIndex(sf.Index)
		}
		switch {
		case f.CanInt() && low:
			f.SetInt(math.MinInt64 >> (64 - f.Type().Bits()))
		case f.CanInt():
			f.SetInt(math.MaxInt64 >> (64 - f.Type().Bits()))
		case f.CanFloat() && low:
			f.SetFloat(-math.MaxFloat64)
		case f.CanFloat():
			f.SetFloat(math.MaxFloat64)
		default:
			return ""
		}
		for _, p := range c.Problems() {
			if rest, ok := strings.CutPrefix(p, key); ok && (strings.HasPrefix(rest, " ") || strings.HasPrefix(rest, ":")) {
				if _, must, ok := strings.Cut(rest, "must "); ok {
					return "must " + must
				}
			}
		}
	}
	return ""
}
