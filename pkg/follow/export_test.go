package follow

// SetQueue bounds the queues of the listeners that start following f
// from now on to events events and bytes of payload.
func SetQueue(f *Follower, events, bytes int) { f.queueEvents, f.queueBytes = events, bytes }
