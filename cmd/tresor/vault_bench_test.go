package main

import (
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/fdj/tresor/eventstore"
	"github.com/fdj/tresor/internal/bench"
	"github.com/fdj/tresor/settlement"
)

// Sizes of BenchmarkVaultFollowsSimulate's stream: long enough that the
// catch-up lasts many of the vault's one-second rounds, which its status
// advances by.
const (
	vaultBenchPlays   = 60_000
	vaultBenchPlayers = 1024
	// lagSampleEvery is well under the second the vault's status moves
	// by, so that the lag's percentiles see its steps.
	lagSampleEvery = 100 * time.Millisecond
)

// BenchmarkVaultFollowsSimulate runs `tresor simulate` at full speed
// (vaultBenchPlays plays, every command durable) against an embedded
// nats-server with a client listener, and a real `tresor vault` following
// it; it samples the vault's status every lagSampleEvery for its lag
// (events and seconds), and measures how long after simulate ends the vault has
// verified everything. Then a second vault, started on the finished
// stream, catches up from nothing: its rate is reported against a raw
// ordered read of the same stream measured before and after it, and
// against atomic batches of messages like the events into a sync-always
// stream (how a copy on --vault-nats is written; the embedded copy goes
// as plain messages), and with the CPU each spends per event (the
// vault's process; the raw read's server and reader).
//
//	go test -run '^$' -bench BenchmarkVaultFollowsSimulate -benchtime 1x ./cmd/tresor/
//
// TRESOR_VAULT_BIN runs another build of the vault (both vaults) on the
// same stream, to compare two builds run one after the other.
func BenchmarkVaultFollowsSimulate(b *testing.B) {
	for range b.N {
		benchVault(b)
	}
}

func benchVault(b *testing.B) {
	ctx := context.Background()
	srv, err := eventstore.RunEmbedded(eventstore.EmbeddedConfig{DataDir: b.TempDir(), ListenAddr: "127.0.0.1:0"})
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Shutdown()
	sealKey := writeKey(b, ed25519.SeedSize)
	pub := hex.EncodeToString(sealPublicKey(b, sealKey))
	sim := exec.Command(tresorBin, "simulate", "--nats", srv.ClientURL(), "--master-key-file", writeKey(b, settlement.MasterKeySize),
		"--seal-key-file", sealKey, "--plays", strconv.Itoa(vaultBenchPlays), "--players", strconv.Itoa(vaultBenchPlayers), "--quiet")
	simDone := make(chan error, 1)
	if err := sim.Start(); err != nil {
		b.Fatal(err)
	}
	go func() { simDone <- sim.Wait() }()
	var store *eventstore.NATSStore
	for deadline := time.Now().Add(60 * time.Second); store == nil; time.Sleep(5 * time.Millisecond) {
		if store, err = eventstore.Connect(ctx, srv.ClientURL(), eventstore.Config{ReadOnly: true}); err != nil && time.Now().After(deadline) {
			b.Fatalf("no stream after 60s: %v", err)
		}
	}
	defer store.Close()

	v := startVault(b, b.TempDir(), srv.ClientURL(), pub, "--inbox-prefix", "_INBOX")
	var lagEvents, lagSeconds []float64
	var simEnd time.Time
	var head uint64
	for tick := time.NewTicker(lagSampleEvery); ; <-tick.C {
		select {
		case err := <-simDone:
			if err != nil {
				b.Fatalf("simulate: %v", err)
			}
			simEnd, simDone = time.Now(), nil
			if head, err = store.LastSequence(ctx); err != nil {
				b.Fatal(err)
			}
		default:
		}
		st := v.vaultStatus()
		if simEnd.IsZero() {
			lagEvents, lagSeconds = append(lagEvents, st["lag_events"].(float64)), append(lagSeconds, st["lag_seconds"].(float64))
			continue
		}
		if st["verified_seq"].(float64) >= float64(head) {
			break
		}
		if time.Since(simEnd) > 5*time.Minute {
			b.Fatalf("the vault at %v, 5 minutes after simulate ended at %d", st["verified_seq"], head)
		}
	}
	caughtUp := time.Since(simEnd)
	v.stop()

	// The yardstick is read before and after the catch-up, and the rate
	// compared with their mean: on a shared machine the load changes
	// within a run. Their CPU (this process's: the server's and the
	// reader's) and the vault's are the bound on a machine of few cores.
	before, rawCPU := orderedRead(b, store, head)
	start := time.Now()
	fresh := startVault(b, b.TempDir(), srv.ClientURL(), pub, "--inbox-prefix", "_INBOX")
	eventually(b, 10*time.Minute, func() bool { return fresh.vaultStatus()["verified_seq"].(float64) >= float64(head) })
	rate := float64(head) / time.Since(start).Seconds() // float-ok: a rate
	fresh.stop()
	after, afterCPU := orderedRead(b, store, head)
	raw := (before + after) / 2
	vaultCPU := perEventMicros(fresh.cmd.ProcessState.UserTime()+fresh.cmd.ProcessState.SystemTime(), head)
	// What a copy on --vault-nats takes: atomic batches of messages like
	// the events into a sync-always stream configured like Tresor's.
	likeEvents := atomicBatchesOf(b, eventsShapeOf(b, store, head))
	b.ReportMetric(float64(head), "events")
	b.ReportMetric(quantile(lagEvents, 0.99), "lag_p99_events")
	b.ReportMetric(quantile(lagSeconds, 0.99), "lag_p99_s")
	b.ReportMetric(float64(caughtUp.Milliseconds()), "caught_up_ms")
	b.ReportMetric(rate, "catch_up_events/s")
	b.ReportMetric(before, "raw_read_before_events/s")
	b.ReportMetric(after, "raw_read_after_events/s")
	b.ReportMetric(rate/raw, "catch_up_over_raw")
	b.ReportMetric(likeEvents, "batches_like_events_msgs/s")
	b.ReportMetric(rate/likeEvents, "catch_up_over_batches")
	b.ReportMetric(vaultCPU, "catch_up_cpu_us/event")
	b.ReportMetric(perEventMicros(rawCPU+afterCPU, 2*head), "raw_read_cpu_us/event")
	// The most a vault catching up can reach with every core of the
	// machine to itself, as a ratio of the raw read.
	b.ReportMetric(float64(runtime.NumCPU())*float64(time.Second/time.Microsecond)/vaultCPU/raw, "catch_up_cpu_bound_over_raw")
}

// orderedRead measures the raw ordered read of the stream up to head, and
// the CPU this process spent on it.
func orderedRead(b *testing.B, store *eventstore.NATSStore, head uint64) (float64, time.Duration) {
	b.Helper()
	cpu := processCPU()
	rate, err := bench.MeasureOrderedRead(context.Background(), store, 1, head)
	if err != nil {
		b.Fatal(err)
	}
	return rate, processCPU() - cpu
}

// perEventMicros is cpu over events, in microseconds.
func perEventMicros(cpu time.Duration, events uint64) float64 { // float-ok: a mean
	return float64(cpu.Microseconds()) / float64(events)
}

// quantile is the q-quantile of samples (0 for none).
func quantile(samples []float64, q float64) float64 { // float-ok: figures of a benchmark
	if len(samples) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(samples))
	return s[min(len(s)-1, int(q*float64(len(s))))]
}
