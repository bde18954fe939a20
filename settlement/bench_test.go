package settlement

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/fdj/tresor/eventstore/eventstoretest"
	"github.com/fdj/tresor/personal"
)

// BenchmarkWriterPlays measures one play (a stake and four throws, every
// command durable) through the writer, the event log and the committer on
// an embedded sync-always server, with 2 000 players playing at once (as
// simulate is run): the time, the allocations and the CPU time (cpu-µs,
// user and system, the embedded server's included) of the whole process
// per play, the funding of the players excluded. On a shared machine the
// CPU time moves less than the wall time.
//
//	go test -run '^$' -bench WriterPlays -benchmem -benchtime 20000x ./settlement/
func BenchmarkWriterPlays(b *testing.B) {
	n := startNode(b, b.TempDir(), nil)
	ctx := eventstoretest.Ctx(b, 30*time.Minute)
	var cpu0 time.Duration
	_, err := Simulate(ctx, n.w, SimConfig{Price: 200, Plays: b.N, Players: min(b.N, 2000),
		Measure: func() func() {
			b.ResetTimer()
			cpu0 = processCPU(b)
			return func() {
				b.StopTimer()
				b.ReportMetric(float64((processCPU(b)-cpu0).Microseconds())/float64(b.N), "cpu-µs/play")
			}
		}})
	if err != nil {
		b.Fatal(err)
	}
}

// processCPU is the CPU time (user and system) the process has used.
func processCPU(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkWriterPlaysSealing is BenchmarkWriterPlays twice in one run:
// a writer that leaves personal fields in clear, then one that seals them
// under data keys in the node's own bucket (Config.Personal). A play has no
// personal field, so the ratio of the two is what sealing costs a play:
// every command's pass through domain.SealCommand.
//
//	go test -run '^$' -bench WriterPlaysSealing -benchtime 20000x ./settlement/
func BenchmarkWriterPlaysSealing(b *testing.B) {
	for _, sealed := range []bool{false, true} {
		name := map[bool]string{false: "clear", true: "sealed"}[sealed]
		b.Run(name, func(b *testing.B) {
			n := startNodeWith(b, b.TempDir(), func(n *node, c *Config) {
				if sealed {
					keys, err := n.store.OpenDataKeys(context.Background())
					if err != nil {
						b.Fatal(err)
					}
					c.Personal = personal.New(keys, c.Sealer)
				}
			})
			ctx := eventstoretest.Ctx(b, 30*time.Minute)
			_, err := Simulate(ctx, n.w, SimConfig{Price: 200, Plays: b.N, Players: min(b.N, 2000),
				Measure: func() func() {
					b.ResetTimer()
					return b.StopTimer
				}})
			if err != nil {
				b.Fatal(err)
			}
		})
	}
}
