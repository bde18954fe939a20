package domain

import (
	"fmt"
	"runtime"
	"testing"
	"time"
)

// BenchmarkLedgerSnapshot measures the writer's snapshot after one and
// after three sold-out 2 € blocks of the default rules (450 000 plays a
// block by 1 024 players, each played to its fourth throw, one stake every
// 100 ms so that every key is still inside its 48-hour window): its bytes,
// the time to encode it and the longest stretch of that work without a
// pause, the time to decode it (the decode stands between a
// writer's start and ready, and should not grow with the keys), and the
// objects the decode allocates (which do not depend on the machine's load).
func BenchmarkLedgerSnapshot(b *testing.B) {
	for _, blocks := range []int{1, 3} {
		b.Run(fmt.Sprintf("blocks=%d", blocks), func(b *testing.B) { benchmarkLedgerSnapshot(b, blocks) })
	}
}

func benchmarkLedgerSnapshot(b *testing.B, blocks int) {
	rules, err := DefaultRules()
	if err != nil {
		b.Fatal(err)
	}
	w := &world{tb: b, l: NewLedger(rules), now: time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)}
	const players = 1024
	for i := range players {
		p := fmt.Sprint("p", i)
		w.given(ConfigureAccount{Player: p, DepositLimit: amt("1000000"), StakeLimit: amt("1000000")},
			Deposit{Player: p, Amount: 100_000 * Amount(blocks), Key: "d" + p})
	}
	w.given(CreateEmission{Price: 200, Blocks: blocks, First: prepared(b, rules, 200, 1)})
	for i := range blocks * rules.BlockUnits {
		for _, id := range w.l.NextToPrepare() {
			w.l.Prepare(id, prepared(b, rules, 200, byte(2+i/rules.BlockUnits)))
		}
		p := fmt.Sprint("p", i%players)
		d, err := w.do(PlaceStake{Player: p, Stake: 200, Key: fmt.Sprint("s", i)})
		if err != nil {
			b.Fatalf("stake %d: %v", i, err)
		}
		play := d.Events[0].(*StakePlaced).Play
		for t := 1; t <= ThrowCount; t++ {
			if _, err := w.do(MakeThrow{Player: p, Play: play, Throw: t}); err != nil {
				b.Fatalf("throw %d of stake %d: %v", t, i, err)
			}
		}
		w.now = w.now.Add(100 * time.Millisecond)
		w.log = nil
	}
	var data []byte
	var encode, decode, stretch time.Duration
	var allocs uint64
	// One encoder kept from one encoding to the next, as the writer's
	// snapshotter keeps it; its Pause only records the longest stretch
	// of work between two pauses, which a command waiting for the
	// encoding's processor would meet.
	var last time.Time
	enc := LedgerEncoder{Pause: func() {
		stretch = max(stretch, time.Since(last))
		last = time.Now()
	}}
	// Its first encoding grows its buffers, as the writer's first does.
	if _, err := enc.Encode(w.l); err != nil {
		b.Fatal(err)
	}
	stretch = 0
	for b.Loop() {
		start := time.Now()
		last = start
		if data, err = enc.Encode(w.l); err != nil {
			b.Fatal(err)
		}
		encode += time.Since(start)
		stretch = max(stretch, time.Since(last))
		// The benchmark's own ledger makes a heap of gigabytes, which a
		// writer starting has not: collected first, so that the decode
		// does not pay for marking it.
		runtime.GC()
		var m0, m1 runtime.MemStats
		runtime.ReadMemStats(&m0)
		start = time.Now()
		if _, err := DecodeLedger(rules, data); err != nil {
			b.Fatal(err)
		}
		decode += time.Since(start)
		runtime.ReadMemStats(&m1)
		allocs += m1.Mallocs - m0.Mallocs
	}
	b.ReportMetric(float64(len(data))/1e6, "MB")
	b.ReportMetric(float64(encode.Milliseconds())/float64(b.N), "ms-encode")
	b.ReportMetric(float64(stretch.Microseconds())/1e3, "ms-longest-stretch")
	b.ReportMetric(float64(decode.Milliseconds())/float64(b.N), "ms-decode")
	b.ReportMetric(float64(allocs)/float64(b.N), "allocs-decode")
}
