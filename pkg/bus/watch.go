package bus

import "context"

// KVChange is one change of a key-value bucket seen by a watch.
type KVChange struct {
	Key      string
	Value    []byte // nil when Deleted
	Revision uint64
	// Deleted is true when the key was deleted or purged.
	Deleted bool
}

// KVWatcher follows the changes of a key-value bucket.
type KVWatcher interface {
	// Watch calls fn with the current value of every key matching pattern
	// ("*" matches one token, ">" the rest, as in NATS subjects), returns
	// once fn has seen them all, and then keeps calling fn with every later
	// change until ctx ends. fn is called from one goroutine at a time and
	// must not block for long. Watch returns an error when the watch cannot
	// be started; later broker failures are retried by the implementation.
	Watch(ctx context.Context, pattern string, fn func(KVChange)) error
}
