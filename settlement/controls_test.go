package settlement

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fdj/tresor/domain"
	"github.com/fdj/tresor/eventstore/eventstoretest"
)

// TestARaiseDelayStraddlesARestart raises a limit, restarts the writer
// before the delay ends and again after it, and once under settings with a
// longer delay: the raise waits its own 24 hours across restarts, neither
// lost nor applied early, and a settings change does not move it.
func TestARaiseDelayStraddlesARestart(t *testing.T) {
	dir := t.TempDir()
	start := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	var clock atomic.Int64
	clock.Store(start.UnixNano())
	settings := domain.BaselineSettings()
	at := func(c *Config) {
		c.Clock = func() time.Time { return time.Unix(0, clock.Load()) }
		c.Settings = &settings
	}
	n := startNode(t, dir, at)
	lim, raised := domain.Amount(100_00), domain.Amount(300_00)
	exec(t, n.w, domain.ConfigureAccount{Player: "p1", DepositLimit: &lim, StakeLimit: &lim})
	exec(t, n.w, domain.Deposit{Player: "p1", Amount: 100_00, Key: "d1"})
	exec(t, n.w, domain.ConfigureAccount{Player: "p1", DepositLimit: &raised})
	deposit := func(key string, amount domain.Amount) error {
		_, err := n.w.Execute(eventstoretest.Ctx(t, time.Minute), domain.Deposit{Player: "p1", Amount: amount, Key: key})
		return err
	}
	if err := deposit("d2", 50_00); !errors.Is(err, domain.ErrLimitExceeded) {
		t.Fatalf("deposit right after the raise: %v, want limit_exceeded", err)
	}

	// A restart 23 hours later, under settings with a 72-hour delay: the
	// raise still waits, and still for 24 hours.
	n.stop()
	clock.Store(start.Add(23 * time.Hour).UnixNano())
	settings.Version, settings.LimitRaiseDelayHours = "fr-72h", 72
	n = startNode(t, dir, at)
	if err := deposit("d2", 50_00); !errors.Is(err, domain.ErrLimitExceeded) {
		t.Fatalf("deposit 23 hours after the raise: %v, want limit_exceeded", err)
	}
	n.stop()

	// A restart 24 hours after the raise: it applies, though the settings
	// now say 72 hours for a raise, and the settings in force record
	// nothing more.
	clock.Store(start.Add(24 * time.Hour).UnixNano())
	n = startNode(t, dir, at)
	if err := deposit("d2", 150_00); err != nil {
		t.Fatalf("deposit 24 hours after the raise: %v", err)
	}
	// A new raise waits the new settings' 72 hours.
	again := domain.Amount(500_00)
	res := exec(t, n.w, domain.ConfigureAccount{Player: "p1", DepositLimit: &again})
	if lc := res.Events[0].(*domain.LimitChanged); !lc.EffectiveAt.Equal(start.Add(24*time.Hour + 72*time.Hour)) {
		t.Fatalf("raise under the new settings effective %s", lc.EffectiveAt)
	}
	_, l, events := n.replay()
	adopted := 0
	for _, e := range events {
		if s, ok := e.(*domain.SettingsAdopted); ok {
			adopted++
			if s.Version != "fr-72h" {
				t.Fatalf("adopted %+v", s)
			}
		}
	}
	if adopted != 1 || l.Settings.Version != "fr-72h" {
		t.Fatalf("%d SettingsAdopted, settings in force %s: want the change recorded once", adopted, l.Settings.Version)
	}
}
