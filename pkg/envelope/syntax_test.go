package envelope

import (
	"regexp"
	"testing"
)

// The syntaxes as regular expressions: the hand-written checks must agree
// with them on every input.
var syntaxes = []struct {
	name  string
	re    *regexp.Regexp
	check func(string) bool
}{
	{"type", regexp.MustCompile(`^[A-Z][A-Za-z0-9]{0,127}$`), ValidType},
	{"tenant", regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`), ValidTenant},
	{"token id", regexp.MustCompile(`^[A-Za-z0-9_-]{1,128}$`), ValidTokenID},
	{"schema name", regexp.MustCompile(`^[a-z][a-z0-9]*(?:-[a-z0-9]+)*$`), ValidSchemaName},
	{"version", regexp.MustCompile(`^[0-9]+\.[0-9]+$`), ValidVersion},
	{"dataschema", regexp.MustCompile(`^[a-z][a-z0-9]*(?:-[a-z0-9]+)*/[0-9]+\.[0-9]+$`), func(s string) bool {
		_, _, ok := ParseDataSchema(s)
		return ok
	}},
}

var syntaxSamples = []string{
	"", "a", "A", "-", "_", "0", "Z9", "PlaceOrder", "placeOrder", "Place-Order", "Place_Order",
	"default", "acme-1", "-acme", "acme-", "Acme", "a--b", "a-b-c", "a-", "place-order", "place-order2",
	"1.0", "10.22", "1.", ".1", "1..0", "1.0.0", "a.0", "1.0\n", "\n1.0", "place-order/1.0",
	"place-order/1", "Place-order/1.0", "place-order/1.0/2", "/1.0", "place-order/", "place--order/1.0",
	"ab_c-D9", "é", "aé", "order\x00", string(make([]byte, 63)), "ünicode",
	"a123456789012345678901234567890123456789012345678901234567890123",
	"a12345678901234567890123456789012345678901234567890123456789012",
}

func TestSyntaxMatchesRegexp(t *testing.T) {
	long := make([]byte, 130)
	for i := range long {
		long[i] = 'a'
	}
	samples := append([]string{}, syntaxSamples...)
	for n := 126; n <= 130; n++ {
		samples = append(samples, string(long[:n]), "A"+string(long[:n-1]))
	}
	for _, sx := range syntaxes {
		for _, s := range samples {
			if got, want := sx.check(s), sx.re.MatchString(s); got != want {
				t.Errorf("%s %q: got %v, the regular expression says %v", sx.name, s, got, want)
			}
		}
	}
}

func FuzzSyntax(f *testing.F) {
	for _, s := range syntaxSamples {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, sx := range syntaxes {
			if got, want := sx.check(s), sx.re.MatchString(s); got != want {
				t.Errorf("%s %q: got %v, the regular expression says %v", sx.name, s, got, want)
			}
		}
	})
}
