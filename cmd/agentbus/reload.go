package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
	"time"
)

// catalogReloader is what followCatalog needs of a running agentbus;
// *server.Server implements it. Both log what they did.
type catalogReloader interface {
	ReloadCatalog(ctx context.Context) error
	ReloadCatalogIfChanged(ctx context.Context) error
}

// watchHangup returns the channel SIGHUP arrives on from now on, and the
// function that stops it.
func watchHangup() (<-chan os.Signal, func()) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	return hup, func() { signal.Stop(hup) }
}

// followCatalog reloads s's catalogue at every value of hup (SIGHUP) and,
// when every is positive, every that often if a file of its directories
// changed, until ctx ends. A reload refused leaves the catalogue as it
// was; the server logs why.
func followCatalog(ctx context.Context, s catalogReloader, hup <-chan os.Signal, every time.Duration) {
	var tick <-chan time.Time
	if every > 0 {
		t := time.NewTicker(every)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			_ = s.ReloadCatalog(ctx)
		case <-tick:
			_ = s.ReloadCatalogIfChanged(ctx)
		}
	}
}
