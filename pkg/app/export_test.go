package app

// HandoffLen counts the handoff's entries, for tests in package app_test.
func HandoffLen(a *App) int {
	if a.handoff == nil {
		return 0
	}
	a.handoff.mu.Lock()
	defer a.handoff.mu.Unlock()
	return len(a.handoff.cur) + len(a.handoff.prev)
}
