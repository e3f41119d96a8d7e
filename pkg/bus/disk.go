package bus

import "errors"

// Disk is the replica's own ordered key-value store on local disk
// (pkg/localstore): the read models that would otherwise grow in memory
// or in start-up time (the correlation index's history, the type index,
// the registries' copies) keep their entries there, each with the log
// sequence it reflects, and are rebuilt from the logs when it is absent
// or damaged. Keys sort bytewise. Nothing on it is shared with other replicas: each builds its
// own from the logs. Safe for concurrent use.
type Disk interface {
	// Get returns a copy of key's value, and whether key is present.
	Get(key []byte) (val []byte, ok bool, err error)
	// Scan calls fn with each key in [from, to) and its value, in order,
	// until fn returns false or the keys run out. key and val are valid
	// only during the call.
	Scan(from, to []byte, fn func(key, val []byte) bool) error
	// Write stores writes atomically: all of them or none. It returns
	// once they are in the store's log, without waiting for the disk to
	// sync (what it holds is rebuilt from the logs, which are synced).
	Write(writes []DiskWrite) error
}

// ErrDiskClosed is returned by a use of a Disk after it was closed (the
// replica is stopping).
var ErrDiskClosed = errors.New("the store on disk is closed")

// DiskWrite is one key of a Disk.Write: Val stored under Key, or Key
// removed when Delete.
type DiskWrite struct {
	Key, Val []byte
	Delete   bool
}
