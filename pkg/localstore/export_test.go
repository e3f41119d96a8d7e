package localstore

import "github.com/cockroachdb/pebble/v2"

// DiskBytesOfGet is the bytes of the blocks (index, filter, data) a Get of
// key reads from its tables rather than from the block cache.
func DiskBytesOfGet(s *Store, key []byte) (uint64, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	it, err := s.db.NewIter(&pebble.IterOptions{UseL6Filters: true})
	if err != nil {
		return 0, err
	}
	it.SeekPrefixGE(key)
	st := it.Stats().InternalStats
	return st.BlockBytes - st.BlockBytesInCache, it.Close()
}

// FilterBytes is the size of the Bloom filters of s's tables.
func FilterBytes(s *Store) (uint64, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	levels, err := s.db.SSTables(pebble.WithProperties())
	if err != nil {
		return 0, err
	}
	var n uint64
	for _, tables := range levels {
		for _, t := range tables {
			n += t.Properties.FilterSize
		}
	}
	return n, nil
}

// CachedBytes is the bytes of blocks s's block cache holds.
func CachedBytes(s *Store) int64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.db.Metrics().BlockCache.Size
}
