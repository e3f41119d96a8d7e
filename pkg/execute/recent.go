package execute

// recent is a map that forgets its oldest entries: entries live in two
// generations, and when the current one is full (by count, or by the sizes
// its entries were put with) it becomes the previous one and the previous
// one is dropped. So it holds the newest entries, at most twice its bounds,
// however many are put and never looked at again. The caller locks.
type recent[V any] struct {
	maxLen, maxSize int // bounds of one generation; maxSize 0: by count only
	cur, prev       map[string]recentEntry[V]
	curSize         int
}

type recentEntry[V any] struct {
	v    V
	size int
}

func newRecent[V any](maxLen, maxSize int) recent[V] {
	return recent[V]{maxLen: maxLen, maxSize: maxSize}
}

// put adds v under key, counting size towards the generation's bound,
// after forgetting any entry key had.
func (r *recent[V]) put(key string, v V, size int) {
	r.remove(key, nil)
	if r.cur == nil || len(r.cur) >= r.maxLen || r.maxSize > 0 && r.curSize+size > r.maxSize {
		r.prev, r.cur, r.curSize = r.cur, make(map[string]recentEntry[V], min(r.maxLen, 1024)), 0
	}
	r.cur[key] = recentEntry[V]{v: v, size: size}
	r.curSize += size
}

// has reports whether key has an entry.
func (r *recent[V]) has(key string) bool {
	_, inCur := r.cur[key]
	_, inPrev := r.prev[key]
	return inCur || inPrev
}

// remove forgets the entry of key and returns it; with match, only an
// entry match accepts.
func (r *recent[V]) remove(key string, match func(V) bool) (V, bool) {
	for i, m := range []map[string]recentEntry[V]{r.cur, r.prev} {
		if e, ok := m[key]; ok && (match == nil || match(e.v)) {
			delete(m, key)
			if i == 0 {
				r.curSize -= e.size
			}
			return e.v, true
		}
	}
	var zero V
	return zero, false
}

// len is the number of entries held.
func (r *recent[V]) len() int { return len(r.cur) + len(r.prev) }
