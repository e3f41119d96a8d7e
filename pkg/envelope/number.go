package envelope

import (
	"strconv"
	"strings"
)

// ExactNumber reports whether num, a JSON number's text, survives a
// float64 unchanged: read as the nearest float64 (IEEE 754 binary64, the
// number of JavaScript and of most JSON decoders) and written back as the
// shortest decimal that reads as that float64 (strconv.FormatFloat(f, 'g',
// -1, 64), JavaScript's JSON.stringify), it has the same value. The schema
// validator reads numbers exactly, as decimals; a reader of the stored
// data may read them as float64; only on the numbers this accepts do the
// two agree. It refuses:
//
//   - a magnitude beyond float64's range, about 1.8e308 (1e400 would read
//     as infinity);
//   - a non-zero value so small that it reads as 0 (1e-400), or as
//     another value (4.9e-324 reads as 5e-324);
//   - more significant digits than a float64 keeps: 9007199254740993
//     (2^53+1) reads as 9007199254740992, and a 45-digit integer as
//     another one.
//
// Any number of at most 15 significant digits within float64's normal
// range (magnitudes from about 2.2e-308 to 1.8e308) is accepted, and so is
// every integer from -2^53 to 2^53. Numbers are compared by value: 1.0,
// 1E0 and 1 are all accepted. Safe for concurrent use.
func ExactNumber(num string) bool {
	if len(num) <= 15 && strings.IndexAny(num, "eE") < 0 {
		// At most 15 significant digits, and a magnitude between 1e-14
		// and 1e15 unless zero: always carried.
		return true
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil {
		return false // out of range, or not a number
	}
	var buf [32]byte
	return sameDecimal(num, string(strconv.AppendFloat(buf[:0], f, 'g', -1, 64)))
}

// sameDecimal reports whether the decimal numbers a and b, each a JSON
// number or strconv's 'g' form of one, have the same value.
func sameDecimal(a, b string) bool {
	na, ok := normalDecimal(a)
	if !ok {
		return false
	}
	nb, ok := normalDecimal(b)
	return ok && na == nb
}

// decimal is a number's value as 0.digits × 10^exp with neg its sign:
// digits without leading or trailing zeros, and "" (exp and neg 0) for
// zero.
type decimal struct {
	neg    bool
	digits string
	exp    int
}

// normalDecimal reads s, -?digits[.digits][(e|E)[+-]digits]. ok is false
// for an exponent beyond int's range on a non-zero value.
func normalDecimal(s string) (decimal, bool) {
	var d decimal
	if strings.HasPrefix(s, "-") {
		d.neg, s = true, s[1:]
	}
	mant, expText, hasExp := strings.Cut(strings.ToLower(s), "e")
	intPart, frac, _ := strings.Cut(mant, ".")
	all := intPart + frac
	lead := len(all) - len(strings.TrimLeft(all, "0"))
	digits := strings.TrimRight(all[lead:], "0")
	if digits == "" {
		return decimal{}, true // zero, whatever its sign and exponent
	}
	exp := 0
	if hasExp {
		e, err := strconv.Atoi(strings.TrimPrefix(expText, "+"))
		if err != nil {
			return decimal{}, false
		}
		exp = e
	}
	// The value is 0.all × 10^(len(intPart)+exp); dropping lead leading
	// zeros moves the point left by lead.
	point := len(intPart) - lead
	if exp > 0 && point > int(^uint(0)>>1)-exp || exp < 0 && point < -int(^uint(0)>>1)-exp {
		return decimal{}, false
	}
	d.digits, d.exp = digits, point+exp
	return d, true
}
