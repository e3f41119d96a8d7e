package projection

// RegistryHeld returns the log sequence the disk holds r at.
func RegistryHeld[T any](r *Registry[T]) (uint64, error) { return r.disk.held() }

// RegistryKey returns the key of tenant's record id of r on the disk.
func RegistryKey[T any](r *Registry[T], tenant, id string) []byte {
	return r.disk.removal(tenant, id).Key
}

// RegistryWritten reports whether the disk holds every change of r.
func RegistryWritten[T any](r *Registry[T]) bool {
	r.disk.mu.Lock()
	defer r.disk.mu.Unlock()
	return len(r.disk.pending) == 0 && r.disk.seq == r.disk.through
}

// CopyKey returns the key of the copy of the event at seq on the disk.
func CopyKey(seq uint64) []byte { return copyKey(seq) }
