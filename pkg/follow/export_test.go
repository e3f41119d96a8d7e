package follow

// SetQueue bounds the queues of the listeners that start following f
// from now on to n events.
func SetQueue(f *Follower, n int) { f.queueEvents = n }
