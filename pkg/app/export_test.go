package app

// HandoffLen counts the handoff's entries, for tests in package app_test.
func HandoffLen(a *App) int {
	if a.handoff == nil {
		return 0
	}
	a.handoff.mu.Lock()
	defer a.handoff.mu.Unlock()
	return a.handoff.entries.len()
}

// HoldScans takes every pending-command scan slot until release is called.
func HoldScans(a *App) (release func()) {
	for range cap(a.scans) {
		a.scans <- struct{}{}
	}
	return func() {
		for range cap(a.scans) {
			<-a.scans
		}
	}
}

// ReceiptKey is the receipts bucket's key of a command, for tests in
// package app_test.
func ReceiptKey(tenant, corr string) string { return receiptKey(tenant, corr) }
