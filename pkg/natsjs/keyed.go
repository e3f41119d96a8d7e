package natsjs

import "sync"

// keyedWork runs the deliveries of a consumer on a fixed number of
// workers, one key at a time: the deliveries of a key are handled in the
// order given, never two at once, and any idle worker takes any key with
// deliveries waiting. Keys are not bound to a worker (as a hash of the key
// would bind them), so a few busy keys — one per aggregate shard, say —
// keep as many workers busy as there are keys, rather than queueing behind
// the keys that hash to the same worker.
//
// At most bound deliveries are held (given and not yet handled); give
// waits for room.
type keyedWork struct {
	handle func(*delivery)
	slots  chan struct{}  // one per delivery held
	ready  chan *keyQueue // keys with a delivery no worker holds
	mu     sync.Mutex
	keys   map[string]*keyQueue // keys with deliveries held
	held   sync.WaitGroup       // deliveries held
	done   sync.WaitGroup       // workers
}

// keyQueue is one key's deliveries, oldest first. It is in ready, or in a
// worker's hands, never both.
type keyQueue struct {
	key string
	q   []*delivery
}

func newKeyedWork(workers, bound int, handle func(*delivery)) *keyedWork {
	w := &keyedWork{handle: handle, slots: make(chan struct{}, bound),
		// A key is in ready at most once, and there are no more keys
		// than deliveries held: a send to ready never blocks.
		ready: make(chan *keyQueue, bound), keys: map[string]*keyQueue{}}
	w.done.Add(workers)
	for range workers {
		go w.work()
	}
	return w
}

// give queues d behind the deliveries of its key, waiting for room until
// stop is closed (then d is dropped and give reports false).
func (w *keyedWork) give(key string, d *delivery, stop <-chan struct{}) bool {
	select {
	case w.slots <- struct{}{}:
	case <-stop:
		return false
	}
	w.held.Add(1)
	w.mu.Lock()
	kq, busy := w.keys[key]
	if !busy {
		kq = &keyQueue{key: key}
		w.keys[key] = kq
	}
	kq.q = append(kq.q, d)
	w.mu.Unlock()
	if !busy {
		w.ready <- kq
	}
	return true
}

// work handles the oldest delivery of each key it takes, then puts the key
// back behind the others when it has more.
func (w *keyedWork) work() {
	defer w.done.Done()
	for kq := range w.ready {
		w.mu.Lock()
		d := kq.q[0]
		w.mu.Unlock()
		w.handle(d)
		w.mu.Lock()
		kq.q[0] = nil
		kq.q = kq.q[1:]
		more := len(kq.q) > 0
		if !more {
			delete(w.keys, kq.key)
		}
		w.mu.Unlock()
		<-w.slots
		w.held.Done()
		if more {
			w.ready <- kq
		}
	}
}

// close waits until every delivery given is handled, then stops the
// workers. No give may follow or run alongside it.
func (w *keyedWork) close() {
	w.held.Wait()
	close(w.ready)
	w.done.Wait()
}
