package main

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"os/exec"
	"testing"
	"time"

	"github.com/fdj/tresor/eventstore"
	"github.com/fdj/tresor/feed"
	"github.com/fdj/tresor/settlement"
	"github.com/prometheus/client_golang/prometheus"
)

// BenchmarkFeedKeepsUpWithSimulate runs `tresor simulate` at full speed
// (1 024 players, every command durable) against an embedded nats-server
// with a client listener, while a feed in this process follows the stream
// into each target; it samples the lag (the stream's last sequence minus
// the feed's checkpoint) every 10 ms, and measures how long after
// simulate ends the feed has published everything.
//
//	go test -run '^$' -bench BenchmarkFeedKeepsUpWithSimulate -benchtime 1x ./cmd/tresor/
func BenchmarkFeedKeepsUpWithSimulate(b *testing.B) {
	amqpURL := amqpTestURL(b)
	db := freshDatabase(b)
	for _, tg := range []struct {
		name   string
		target func(run string) (feed.Target, error)
	}{
		{"amqp", func(run string) (feed.Target, error) {
			amqpCleanup(b, amqpURL, run, run)
			return feed.NewAMQPTarget(amqpURL, run, run)
		}},
		{"sql", func(run string) (feed.Target, error) { return feed.NewSQLTarget(db, run, run) }},
	} {
		b.Run(tg.name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				benchFeedLag(b, tg.target, fmt.Sprintf("lag_%s_%d", tg.name, time.Now().UnixNano()))
			}
		})
	}
}

func benchFeedLag(b *testing.B, newTarget func(string) (feed.Target, error), run string) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv, err := eventstore.RunEmbedded(eventstore.EmbeddedConfig{DataDir: b.TempDir(), ListenAddr: "127.0.0.1:0"})
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Shutdown()
	sim := exec.Command(tresorBin, "simulate", "--nats", srv.ClientURL(), "--master-key-file", writeKey(b, settlement.MasterKeySize),
		"--seal-key-file", writeKey(b, ed25519.SeedSize), "--plays", "20000", "--players", "1024", "--quiet")
	var simOut, simErr []byte
	simDone := make(chan error, 1)
	go func() {
		out, err := sim.Output()
		simOut = out
		if ee, ok := err.(*exec.ExitError); ok {
			simErr = ee.Stderr
		}
		simDone <- err
	}()

	// The feed starts as soon as simulate has created the stream.
	nc, err := srv.Conn()
	if err != nil {
		b.Fatal(err)
	}
	var store *eventstore.NATSStore
	deadline := time.Now().Add(60 * time.Second)
	for store == nil {
		if store, err = eventstore.Open(ctx, nc, eventstore.Config{ReadOnly: true}); err != nil && time.Now().After(deadline) {
			b.Fatalf("no stream after 60s: %v", err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	defer store.Close()
	target, err := newTarget(run)
	if err != nil {
		b.Fatal(err)
	}
	defer target.Close()
	metrics := feed.NewMetrics(prometheus.NewRegistry())
	feedDone := make(chan error, 1)
	start := time.Now()
	go func() {
		_, err := feed.Run(ctx, store, target, feed.Config{Name: run, Metrics: metrics})
		feedDone <- err
	}()

	var samples, lagSum, lagMax uint64
	var simEnd time.Time
	var head uint64
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-simDone:
			if err != nil {
				b.Fatalf("simulate: %v: %s", err, simErr)
			}
			simEnd, simDone = time.Now(), nil
			if head, err = store.LastSequence(ctx); err != nil {
				b.Fatal(err)
			}
		case err := <-feedDone:
			b.Fatalf("feed stopped: %v", err)
		case <-tick.C:
		}
		last, err := store.LastSequence(ctx)
		if err != nil {
			b.Fatal(err)
		}
		pos := metrics.Position(run)
		if simEnd.IsZero() {
			lag := last - min(last, pos)
			samples, lagSum, lagMax = samples+1, lagSum+lag, max(lagMax, lag)
			continue
		}
		if pos >= head {
			break
		}
		if time.Since(simEnd) > 5*time.Minute {
			b.Fatalf("feed at %d, %d behind, 5 minutes after simulate ended", pos, head-pos)
		}
	}
	caughtUp := time.Since(simEnd)
	cancel()
	<-feedDone
	events := float64(head) / simEnd.Sub(start).Seconds() // float-ok: a rate
	b.ReportMetric(events, "stream_events/s")
	b.ReportMetric(float64(lagMax), "lag_max_events")
	b.ReportMetric(float64(lagSum)/float64(max(samples, 1)), "lag_mean_events") // float-ok: a mean
	b.ReportMetric(float64(caughtUp.Milliseconds()), "caught_up_ms")
	b.Logf("simulate: %s", simOut)
}
