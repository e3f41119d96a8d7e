package envelope

import "strings"

// The token syntaxes of the envelope and of subjects, checked by hand: they
// run several times per command, where a regular expression costs more
// than the rest of the check. syntax_test.go holds each to its regular
// expression.

// ParseDataSchema splits a relative "{schema}/{version}" reference.
func ParseDataSchema(ref string) (schema, version string, ok bool) {
	schema, version, found := strings.Cut(ref, "/")
	if !found || !ValidSchemaName(schema) || !ValidVersion(version) {
		return "", "", false
	}
	return schema, version, true
}

// DefaultTenant is the tenant of single-tenant mode.
const DefaultTenant = "default"

// ValidTenant reports whether s is a valid tenant id:
// ^[a-z0-9][a-z0-9-]{0,62}$.
func ValidTenant(s string) bool {
	if len(s) == 0 || len(s) > 63 || s[0] == '-' {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !isLower(c) && !isDigit(c) && c != '-' {
			return false
		}
	}
	return true
}

// ValidTokenID reports whether s can be an id inside a subject token
// (agent, service, subscription and aggregate ids): ^[A-Za-z0-9_-]{1,128}$.
func ValidTokenID(s string) bool {
	if len(s) == 0 || len(s) > 128 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !isLower(c) && !isUpper(c) && !isDigit(c) && c != '_' && c != '-' {
			return false
		}
	}
	return true
}

// ValidType reports whether s is a PascalCase message type of at most
// MaxTypeLen bytes: ^[A-Z][A-Za-z0-9]*$.
func ValidType(s string) bool {
	if len(s) == 0 || len(s) > MaxTypeLen || !isUpper(s[0]) {
		return false
	}
	for i := 1; i < len(s); i++ {
		if c := s[i]; !isLower(c) && !isUpper(c) && !isDigit(c) {
			return false
		}
	}
	return true
}

// ValidSchemaName reports whether s is a kebab-case schema name:
// ^[a-z][a-z0-9]*(-[a-z0-9]+)*$.
func ValidSchemaName(s string) bool {
	if len(s) == 0 || !isLower(s[0]) || s[len(s)-1] == '-' {
		return false
	}
	for i := 1; i < len(s); i++ {
		c := s[i]
		switch {
		case isLower(c) || isDigit(c):
		case c == '-' && s[i-1] != '-':
		default:
			return false
		}
	}
	return true
}

// ValidVersion reports whether s is a <major>.<minor> version:
// ^[0-9]+\.[0-9]+$.
func ValidVersion(s string) bool {
	major, minor, found := strings.Cut(s, ".")
	return found && digits(major) && digits(minor)
}

func digits(s string) bool {
	if len(s) == 0 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !isDigit(s[i]) {
			return false
		}
	}
	return true
}

func isLower(c byte) bool { return c >= 'a' && c <= 'z' }
func isUpper(c byte) bool { return c >= 'A' && c <= 'Z' }
func isDigit(c byte) bool { return c >= '0' && c <= '9' }
