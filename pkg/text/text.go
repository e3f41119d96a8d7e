// Package text cuts strings and byte slices to a bound without cutting a
// UTF-8 encoded character in half: what agentbus echoes or records of
// outside input (error messages, paths, reasons, answers) is bounded
// through it. It imports only the standard library, so every package may
// import it.
package text

import "unicode/utf8"

// Cut returns the longest prefix of s of at most n bytes (none when n <= 0)
// that does not end inside a UTF-8 encoded character. Bytes that encode no
// character (s need not be valid UTF-8) count as one character each, so a
// cut never steps back more than utf8.UTFMax-1 bytes from n. s itself is
// returned when it is n bytes or shorter.
func Cut[T ~string | ~[]byte](s T, n int) T {
	if len(s) <= n {
		return s
	}
	if n <= 0 {
		return s[:0]
	}
	for i := n - 1; i >= max(0, n-utf8.UTFMax+1); i-- {
		if !utf8.RuneStart(s[i]) {
			continue
		}
		// s[i] starts a character: cut before it if it reaches past n.
		r, size := utf8.DecodeRuneInString(string(s[i:min(len(s), i+utf8.UTFMax)]))
		if r != utf8.RuneError || size > 1 {
			if i+size > n {
				return s[:i]
			}
		}
		break
	}
	return s[:n]
}

// Ellipsis marks where Clip cut a string.
const Ellipsis = "…"

// Clip returns s when it is n bytes or shorter, else Cut(s, n) followed by
// Ellipsis (so up to n+len(Ellipsis) bytes).
func Clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return Cut(s, n) + Ellipsis
}
