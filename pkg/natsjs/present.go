package natsjs

import (
	"context"
	"fmt"
)

// Missing names the streams and key-value buckets of specs (consumers
// are left out) the server does not hold now, as "stream NAME" or
// "bucket NAME", in specs' order: none when every one is there. It asks
// once, for the names of the account's streams (a bucket is the stream
// KV_<bucket>). An error means the server could not be asked, translated
// as the store's errors are (errs.ErrUnavailable for no answer now).
// Safe for concurrent use.
func (c *Conn) Missing(ctx context.Context, specs []Spec) ([]string, error) {
	held := map[string]bool{}
	names := c.JS.StreamNames(ctx)
	for n := range names.Name() {
		held[n] = true
	}
	if err := names.Err(); err != nil {
		return nil, translate(fmt.Errorf("listing the streams: %w", err))
	}
	var missing []string
	for _, sp := range specs {
		switch sp.Kind {
		case "stream":
			if !held[sp.Name] {
				missing = append(missing, "stream "+sp.Name)
			}
		case "kv":
			if !held[KVStream(sp.Name)] {
				missing = append(missing, "bucket "+sp.Name)
			}
		}
	}
	return missing, nil
}
