package server

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/agentbus/agentbus/pkg/decide"
)

// TestClipReasonKeepsWithinTheSchema: a reason past decide.MaxReasonLen
// is cut to it on a character boundary, and a short one is kept as is.
func TestClipReasonKeepsWithinTheSchema(t *testing.T) {
	if got := clipReason("gone"); got != "gone" {
		t.Errorf("clipReason(short) = %q", got)
	}
	long := strings.Repeat("é", decide.MaxReasonLen) // two bytes each
	got := clipReason(long)
	if !utf8.ValidString(got) || len(got) > decide.MaxReasonLen || !strings.HasSuffix(got, "...") {
		t.Errorf("clipReason(long) = %d bytes, valid UTF-8 %v, ends %q", len(got), utf8.ValidString(got), got[max(0, len(got)-5):])
	}
}
