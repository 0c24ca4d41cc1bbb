package daemon

import (
	"context"
	"log/slog"
	"time"

	"github.com/homefs/homefs/cas"
	"github.com/homefs/homefs/internal/sdnotify"
)

// watchdog tells the service manager the daemon is alive every half of
// its watchdog interval, as long as the store answers a read within that
// half: a daemon whose store hangs (a frozen disk) stops pinging, and
// systemd restarts it, which the next serve recovers from as from a
// crash. One check runs at a time; a check that hangs is waited for, not
// stacked.
func watchdog(ctx context.Context, n *sdnotify.Notifier, store cas.HasManyer, log *slog.Logger) {
	half := n.Watchdog / 2
	t := time.NewTicker(half)
	defer t.Stop()
	var pending chan error
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if pending == nil {
			pending = make(chan error, 1)
			go func(done chan<- error) {
				// Badger's reads take no context: a hung disk hangs this
				// goroutine, not the watchdog.
				_, err := store.HasMany(context.Background(), []cas.Ref{{}})
				done <- err
			}(pending)
		}
		timer := time.NewTimer(half)
		select {
		case err := <-pending:
			timer.Stop()
			pending = nil
			if err != nil {
				log.Error("watchdog: the store failed a read; not telling systemd the daemon is alive", "err", err)
				continue
			}
			if err := n.Notify("WATCHDOG=1"); err != nil {
				log.Warn("watchdog", "err", err)
			}
		case <-timer.C:
			log.Error("watchdog: the store did not answer a read in time; not telling systemd the daemon is alive", "waited", half)
		case <-ctx.Done():
			timer.Stop()
			return
		}
	}
}
