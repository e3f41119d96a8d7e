// Package strict reads a configuration document (YAML, or JSON) into a
// struct strictly: every key must name a field by its json tag, in the
// tag's case, and every value must be one its field takes; each mistake
// is named by its key ("registry.waitTimeout: invalid duration \"5
// seconds\""), without the decoder's words. It knows no setting: the
// ranges of numbers come from the caller.
package strict
