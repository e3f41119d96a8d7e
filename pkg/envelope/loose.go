package envelope

import "encoding/json"

// Loose is what can be read of a stored command envelope whatever else is
// wrong with it: its string members, each empty when absent or not a
// string.
type Loose struct{ ID, Source, Type, Time string }

// ReadLoose reads raw as far as it can; it never fails.
func ReadLoose(raw []byte) Loose {
	var e Loose
	_ = json.Unmarshal(raw, &e)
	return e
}

// CorrelationID derives the command's correlation id of tenant from its id
// and source when both are non-empty strings within the envelope's length
// limits, or returns "". It is the id a valid envelope derives
// (CorrelationID), so a broken copy of a command is known by the same id.
func (e Loose) CorrelationID(tenant string) string {
	if e.ID == "" || e.Source == "" || len(e.ID) > MaxIDLen || len(e.Source) > MaxSourceLen {
		return ""
	}
	return CorrelationID(tenant, e.Source, e.ID)
}
