package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/fdj/tresor/domain"
	"github.com/fdj/tresor/eventstore"
	"github.com/fdj/tresor/internal/bench"
	"github.com/fdj/tresor/settlement"
	"github.com/fdj/tresor/snapshot"
	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
)

// simulateOptions are simulate's own flags.
type simulateOptions struct {
	price     string
	plays     int
	players   int
	rate      int
	asJSON    bool
	yardstick bool
	quiet     bool
	cpuProf   string
	memProf   string
}

// simulatePlaysMax bounds one run (ten blocks' worth).
const simulatePlaysMax = 4_500_000

// simulateRateMax bounds --rate, far above what one writer sustains.
const simulateRateMax = 1_000_000

// newSimulateCmd is the tresor simulate command.
func newSimulateCmd() *cobra.Command {
	var cfg Config
	var o simulateOptions
	cmd := &cobra.Command{
		Use:   "simulate --price P --plays N --players M",
		Short: "Drive the real write path with M funded players playing N plays of 4 throws, and report",
		Long: "simulate opens the stream (the embedded server on --data, or --nats URL), funds M players,\n" +
			"and has them play N plays through the settlement writer, every event durable. It reports plays,\n" +
			"stakes, prizes, tiers, plays/s, events/s, play latency and whether the books balance, replayed\n" +
			"from the stream. --plays 450000 sells out a block; serve and audit can open the same --data.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := cfg.Validate(); err != nil {
				return err
			}
			price, err := domain.ParseAmount(o.price)
			if err != nil {
				return usagef("--price: %v", err)
			}
			if o.plays < 1 || o.plays > simulatePlaysMax {
				return usagef("--plays %d: want 1 to %d", o.plays, simulatePlaysMax)
			}
			if o.players < 1 || o.players > o.plays || o.players > 100_000 {
				return usagef("--players %d: want 1 to min(--plays, 100000)", o.players)
			}
			if o.rate < 0 || o.rate > simulateRateMax {
				return usagef("--rate %d: want 0 (as fast as answered) to %d plays a second", o.rate, simulateRateMax)
			}
			// The profiles cover the plays alone (see playsProfile), not
			// the setup.
			return runProfiled(cmd, "", func(ctx context.Context) error {
				rep, err := simulate(ctx, &cfg, price, o, cmd.ErrOrStderr())
				if err != nil {
					return err
				}
				if err := writeReport(cmd, o.asJSON, rep); err != nil {
					return err
				}
				if !rep.BooksBalanced {
					return fmt.Errorf("the books do not balance: %s", rep.BooksDetail)
				}
				return nil
			})
		},
	}
	bindWriterFlags(cmd, &cfg)
	f := cmd.Flags()
	f.StringVar(&o.price, "price", "1", "stake of every play: 0.50, 1 or 2")
	f.IntVar(&o.plays, "plays", 10_000, "number of plays")
	f.IntVar(&o.players, "players", 256, "number of players playing at once")
	f.IntVar(&o.rate, "rate", 0, "start this many plays a second whatever the answers (open loop; latency counts from when a play was due); 0 plays as fast as answered")
	f.BoolVar(&o.asJSON, "json", false, "print the report as one JSON object")
	f.BoolVar(&o.yardstick, "yardstick", false, "also measure raw 1 000-message atomic batches on the same server, 3 rounds before the plays and 3 after; with --rate, also a raw writer's command latency at the plays' rate")
	f.BoolVar(&o.quiet, "quiet", false, "no progress bar")
	f.StringVar(&o.cpuProf, "cpuprofile", "", "write a CPU profile of the plays (not the setup) to this file (go tool pprof)")
	f.StringVar(&o.memProf, "memprofile", "", "write a heap profile (allocations included) to this file once the plays are over (go tool pprof)")
	return cmd
}

// simulateReport is simulate's report; its JSON keys are a contract.
type simulateReport struct {
	Price           domain.Amount  `json:"price"`
	Plays           int            `json:"plays"`
	Players         int            `json:"players"`
	Rate            int            `json:"rate,omitempty"` // plays a second asked for (open loop)
	StakesTotal     domain.Amount  `json:"stakes_total"`
	PrizesTotal     domain.Amount  `json:"prizes_total"`
	Tiers           map[string]int `json:"tiers"`
	Events          int            `json:"events"`
	ElapsedSeconds  float64        `json:"elapsed_seconds"`   // float-ok: a duration, not money
	PlaysPerSecond  float64        `json:"plays_per_second"`  // float-ok: a rate, not money
	EventsPerSecond float64        `json:"events_per_second"` // float-ok: a rate, not money
	LatencyP50Ms    float64        `json:"latency_p50_ms"`    // float-ok: a duration, not money
	LatencyP99Ms    float64        `json:"latency_p99_ms"`    // float-ok: a duration, not money
	// CommandP50Ms and CommandP99Ms time one command (a stake or a throw)
	// from the click to its durable answer; a play is five of them.
	CommandP50Ms float64 `json:"command_latency_p50_ms"` // float-ok: a duration
	CommandP99Ms float64 `json:"command_latency_p99_ms"` // float-ok: a duration
	// With snapshots, SnapshotsTaken counts the writer's snapshots
	// during the run, and the commands' latencies are also given by what
	// its snapshotter was doing when they were clicked: taking one
	// (encoding or storing it), encoding, storing, or nothing.
	SnapshotsTaken          int     `json:"snapshots_taken"`
	CommandsDuringSnapshots int     `json:"commands_during_snapshots"`
	CommandDuringP50Ms      float64 `json:"command_latency_p50_ms_during_snapshots"`  // float-ok: a duration
	CommandDuringP99Ms      float64 `json:"command_latency_p99_ms_during_snapshots"`  // float-ok: a duration
	CommandEncodingP50Ms    float64 `json:"command_latency_p50_ms_while_encoding"`    // float-ok: a duration
	CommandEncodingP99Ms    float64 `json:"command_latency_p99_ms_while_encoding"`    // float-ok: a duration
	CommandStoringP50Ms     float64 `json:"command_latency_p50_ms_while_storing"`     // float-ok: a duration
	CommandStoringP99Ms     float64 `json:"command_latency_p99_ms_while_storing"`     // float-ok: a duration
	CommandOutsideP50Ms     float64 `json:"command_latency_p50_ms_outside_snapshots"` // float-ok: a duration
	CommandOutsideP99Ms     float64 `json:"command_latency_p99_ms_outside_snapshots"` // float-ok: a duration
	// CPUCores* are the processor time the whole process used (writer,
	// embedded server, snapshotter) over the wall time, within the plays:
	// while the writer's snapshots were encoded, while they were stored,
	// and outside them (a snapshot begun before the plays or stored after
	// them counts as outside). A phase's excess over outside, times its
	// length, is what it cost: the processor time a phase takes does not
	// depend on what else the machine runs, where the commands' tail
	// latency does.
	CPUCoresEncoding float64     `json:"cpu_cores_while_encoding,omitempty"`    // float-ok: a rate
	CPUCoresStoring  float64     `json:"cpu_cores_while_storing,omitempty"`     // float-ok: a rate
	CPUCoresOutside  float64     `json:"cpu_cores_outside_snapshots,omitempty"` // float-ok: a rate
	BooksBalanced    bool        `json:"books_balanced"`
	BooksDetail      string      `json:"books_detail"`
	Blocks           []blockLine `json:"blocks"`
	Yardstick        *float64    `json:"yardstick_events_per_second,omitempty"` // float-ok: a rate
	YardstickRatio   *float64    `json:"events_per_second_over_yardstick,omitempty"`
	// With --yardstick, the yardstick is also measured in yardstickRoundsEach
	// rounds before the plays (on the fresh server, the writer open and
	// idle) and in as many after them (the first of which is
	// yardstick_events_per_second above, measured as it always was), and
	// each side is quoted as the median of its rounds, with Tresor's rate
	// over it: one round is about a second of the machine's time, and a
	// shared machine's load moves it by more than Tresor's own changes do.
	YardstickBefore      *float64         `json:"yardstick_before_events_per_second,omitempty"` // float-ok: a rate
	YardstickBeforeRatio *float64         `json:"events_per_second_over_yardstick_before,omitempty"`
	YardstickAfter       *float64         `json:"yardstick_after_events_per_second,omitempty"` // float-ok: a rate
	YardstickAfterRatio  *float64         `json:"events_per_second_over_yardstick_after,omitempty"`
	YardstickRounds      *yardstickRounds `json:"yardstick_rounds_events_per_second,omitempty"`
	// With --yardstick and --rate, a raw writer's commands after the plays,
	// on the same server, at the plays' command rate and events per command
	// for as long as the plays lasted (5 s to 2 min;
	// bench.LatencyYardstick): their 50th and 99th percentiles, and Tresor's command
	// p99 over theirs. When the writer took snapshots during the plays, the
	// raw writer's server also stores an object of their mean size as often
	// and at the same pace, and its commands' p99 is given while one was
	// being stored and outside (when some commands fell on each side):
	// what the store alone costs any writer here.
	YardstickCommandP50Ms     *float64 `json:"yardstick_command_latency_p50_ms,omitempty"` // float-ok: a duration
	YardstickCommandP99Ms     *float64 `json:"yardstick_command_latency_p99_ms,omitempty"` // float-ok: a duration
	CommandP99OverYardstick   *float64 `json:"command_latency_p99_over_yardstick,omitempty"`
	YardstickPuts             int      `json:"yardstick_puts,omitempty"`
	YardstickPutBytes         int      `json:"yardstick_put_bytes,omitempty"`
	YardstickDuringPutsP99Ms  *float64 `json:"yardstick_command_latency_p99_ms_during_puts,omitempty"`  // float-ok: a duration
	YardstickOutsidePutsP99Ms *float64 `json:"yardstick_command_latency_p99_ms_outside_puts,omitempty"` // float-ok: a duration
	StreamLastSeq             uint64   `json:"stream_last_sequence"`
	SyncEveryWrite            bool     `json:"sync_every_write"`
	EventsPerPlayAvg          float64  `json:"events_per_play"` // float-ok: a ratio
	// Batches, EventsPerBatch and CommitMsAvg describe the committer's
	// atomic batches during the plays (seals included); CPUMicrosPerEvent
	// is the process's CPU time (user and system, the embedded server's
	// included when there is one) during the plays over their events.
	Batches           uint64  `json:"batches"`
	EventsPerBatch    float64 `json:"events_per_batch"` // float-ok: a ratio
	CommitMsAvg       float64 `json:"commit_ms_avg"`    // float-ok: a duration
	CPUMicrosPerEvent float64 `json:"cpu_us_per_event"` // float-ok: a duration
	// The commands' latency split by where it went: waiting to join a
	// batch (the committer's loop busy), in the batch until it was sent
	// (the batch in flight, the linger), its commit (the server's, fsync
	// included), and the rest (the player's scheduling, the writer's queue
	// and decider, the answer's way back). Percentiles of each part, not
	// of one command: they do not add up to the command's.
	QueuedP50Ms    float64 `json:"command_queued_p50_ms"`      // float-ok: a duration
	QueuedP99Ms    float64 `json:"command_queued_p99_ms"`      // float-ok: a duration
	HeldP50Ms      float64 `json:"command_in_batch_p50_ms"`    // float-ok: a duration
	HeldP99Ms      float64 `json:"command_in_batch_p99_ms"`    // float-ok: a duration
	CommittedP50Ms float64 `json:"command_commit_p50_ms"`      // float-ok: a duration
	CommittedP99Ms float64 `json:"command_commit_p99_ms"`      // float-ok: a duration
	OutsideP50Ms   float64 `json:"command_outside_log_p50_ms"` // float-ok: a duration
	OutsideP99Ms   float64 `json:"command_outside_log_p99_ms"` // float-ok: a duration
}

// yardstickRounds are the rates of every round of the yardstick, in the
// order measured.
type yardstickRounds struct {
	Before []float64 `json:"before"` // float-ok: rates
	After  []float64 `json:"after"`  // float-ok: rates
}

// yardstickRoundsEach is how many rounds of the yardstick are measured before
// the plays and after them.
const yardstickRoundsEach = 3

// measureYardstick measures n rounds of the yardstick and returns their
// rates.
func measureYardstick(ctx context.Context, st *stream, n int) ([]float64, error) {
	rates := make([]float64, 0, n)
	for range n {
		rate, err := st.yardstick(ctx)
		if err != nil {
			return nil, fmt.Errorf("yardstick: %w", err)
		}
		rates = append(rates, rate)
	}
	return rates, nil
}

// median is the median of rates (the mean of the middle two for an even
// count).
func median(rates []float64) float64 {
	s := slices.Clone(rates)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// blockLine is one block touched by the run.
type blockLine struct {
	Block string        `json:"block"`
	State string        `json:"state"`
	Sold  int           `json:"sold"`
	Paid  domain.Amount `json:"prizes_paid"`
}

// simulate runs the plays and builds the report.
func simulate(ctx context.Context, cfg *Config, price domain.Amount, o simulateOptions, progress io.Writer) (*simulateReport, error) {
	st, err := openStream(ctx, cfg, nil)
	if err != nil {
		return nil, err
	}
	defer st.Close()
	// spans, with snapshots, records the writer's: the report splits the
	// commands by what they met.
	var spans *bench.SnapshotSpans
	if cfg.Snapshots {
		spans = &bench.SnapshotSpans{CPU: processCPU}
		st.snapshotObserver = spans
	}
	w, err := st.openWriter(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer w.Close()

	var before []float64
	if o.yardstick {
		if before, err = measureYardstick(ctx, st, yardstickRoundsEach); err != nil {
			return nil, err
		}
	}
	var plays playsMeasure
	sim := settlement.SimConfig{Price: price, Plays: o.plays, Players: o.players, Rate: o.rate,
		Measure: func() func() { return plays.start(st.log, o) }}
	if spans != nil {
		sim.Snapshots = spans
	}
	if !o.quiet {
		bar := progressbar.NewOptions(o.plays, progressbar.OptionSetWriter(progress), progressbar.OptionSetDescription("plays"),
			progressbar.OptionShowCount(), progressbar.OptionShowIts(), progressbar.OptionSetItsString("plays"),
			progressbar.OptionThrottle(200*time.Millisecond), progressbar.OptionClearOnFinish())
		defer bar.Finish()
		sim.OnPlay = func() { bar.Add(1) }
	}
	res, err := settlement.Simulate(ctx, w, sim)
	if err != nil {
		return nil, err
	}
	if plays.err != nil {
		return nil, plays.err
	}
	rep := newSimulateReport(cfg, price, o, res, plays)
	if spans != nil {
		rep.splitBySnapshots(res, spans, plays)
	}
	if err := rep.listBlocks(ctx, w, price); err != nil {
		return nil, err
	}
	rep.StreamLastSeq = w.LastSeq()
	rep.BooksBalanced, rep.BooksDetail, err = checkBooks(ctx, st)
	if err != nil {
		return nil, err
	}
	if o.yardstick {
		if err := rep.againstYardstick(ctx, st, before); err != nil {
			return nil, err
		}
		if o.rate > 0 {
			if err := measureLatencyYardstick(ctx, st, spans, rep, res, plays); err != nil {
				return nil, err
			}
		}
	}
	return rep, nil
}

// newSimulateReport reports the plays' totals, rates and latencies.
func newSimulateReport(cfg *Config, price domain.Amount, o simulateOptions, res *settlement.SimResult, plays playsMeasure) *simulateReport {
	secs := res.Elapsed.Seconds()
	rep := &simulateReport{
		Price: price, Plays: res.Plays, Players: o.players, Rate: o.rate, StakesTotal: res.StakesTotal, PrizesTotal: res.PrizesTotal,
		Tiers: map[string]int{}, Events: res.Events, ElapsedSeconds: secs,
		PlaysPerSecond: float64(res.Plays) / secs, EventsPerSecond: float64(res.Events) / secs,
		EventsPerPlayAvg: float64(res.Events) / float64(res.Plays),
		LatencyP50Ms:     ms(settlement.Percentile(res.Latencies, 50)), LatencyP99Ms: ms(settlement.Percentile(res.Latencies, 99)),
		CommandP50Ms: ms(settlement.Percentile(res.CommandLatencies, 50)), CommandP99Ms: ms(settlement.Percentile(res.CommandLatencies, 99)),
		SyncEveryWrite: cfg.SyncInterval == 0 && cfg.NATSURL == "",
		Batches:        plays.stats.Batches,
	}
	rep.QueuedP50Ms, rep.QueuedP99Ms = percentilesMs(res.CommandQueued)
	rep.HeldP50Ms, rep.HeldP99Ms = percentilesMs(res.CommandHeld)
	rep.CommittedP50Ms, rep.CommittedP99Ms = percentilesMs(res.CommandCommitted)
	rep.OutsideP50Ms, rep.OutsideP99Ms = percentilesMs(res.CommandOutside)
	if plays.stats.Batches > 0 {
		rep.EventsPerBatch = float64(plays.stats.Events) / float64(plays.stats.Batches)
		rep.CommitMsAvg = ms(plays.stats.CommitTime / time.Duration(plays.stats.Batches))
	}
	if res.Events > 0 {
		rep.CPUMicrosPerEvent = float64(plays.cpu.Nanoseconds()) / 1000 / float64(res.Events)
	}
	for _, t := range domain.Tiers {
		rep.Tiers[t.ID()] = res.Tiers[t]
	}
	return rep
}

// splitBySnapshots splits the commands' latencies and the CPU by what the
// writer's snapshots were doing meanwhile.
func (rep *simulateReport) splitBySnapshots(res *settlement.SimResult, spans *bench.SnapshotSpans, plays playsMeasure) {
	by := res.CommandLatenciesBySnapshot
	during := slices.Concat(by[settlement.SnapshotEncoding], by[settlement.SnapshotStoring])
	slices.Sort(during)
	rep.SnapshotsTaken, rep.CommandsDuringSnapshots = spans.Count(), len(during)
	rep.CommandDuringP50Ms, rep.CommandDuringP99Ms = percentilesMs(during)
	rep.CommandEncodingP50Ms, rep.CommandEncodingP99Ms = percentilesMs(by[settlement.SnapshotEncoding])
	rep.CommandStoringP50Ms, rep.CommandStoringP99Ms = percentilesMs(by[settlement.SnapshotStoring])
	rep.CommandOutsideP50Ms, rep.CommandOutsideP99Ms = percentilesMs(by[settlement.NoSnapshot])
	p := spans.PhaseCPU(plays.began, plays.ended)
	rep.CPUCoresEncoding, rep.CPUCoresStoring = cores(p.EncodingCPU, p.EncodingWall), cores(p.StoringCPU, p.StoringWall)
	rep.CPUCoresOutside = cores(plays.cpu-p.EncodingCPU-p.StoringCPU, plays.ended.Sub(plays.began)-p.EncodingWall-p.StoringWall)
}

// listBlocks lists the blocks of the price the run played, as the
// writer's ledger holds them.
func (rep *simulateReport) listBlocks(ctx context.Context, w *settlement.Writer, price domain.Amount) error {
	if err := w.Inspect(ctx, func(l *domain.Ledger) {
		for _, b := range l.Blocks {
			if b.Price == price {
				rep.Blocks = append(rep.Blocks, blockLine{Block: b.ID, State: string(b.State), Sold: b.Sold, Paid: b.Prizes})
			}
		}
	}); err != nil {
		return err
	}
	slices.SortFunc(rep.Blocks, func(a, b blockLine) int { return strings.Compare(a.Block, b.Block) })
	return nil
}

// againstYardstick measures the yardstick after the run, and reports the
// run's rate against it and against the rounds measured before.
func (rep *simulateReport) againstYardstick(ctx context.Context, st *stream, before []float64) error {
	rate, err := st.yardstick(ctx)
	if err != nil {
		return fmt.Errorf("yardstick: %w", err)
	}
	ratio := rep.EventsPerSecond / rate
	rep.Yardstick, rep.YardstickRatio = &rate, &ratio
	more, err := measureYardstick(ctx, st, yardstickRoundsEach-1)
	if err != nil {
		return err
	}
	rounds := &yardstickRounds{Before: before, After: append([]float64{rate}, more...)}
	b, a := median(rounds.Before), median(rounds.After)
	br, ar := rep.EventsPerSecond/b, rep.EventsPerSecond/a
	rep.YardstickBefore, rep.YardstickBeforeRatio, rep.YardstickAfter, rep.YardstickAfterRatio, rep.YardstickRounds = &b, &br, &a, &ar, rounds
	return nil
}

// latencyYardstickMin and latencyYardstickMax bound the latency
// yardstick's run.
const (
	latencyYardstickMin = 5 * time.Second
	latencyYardstickMax = 2 * time.Minute
)

// measureLatencyYardstick runs the latency yardstick after the plays of
// res (simulateReport's YardstickCommand* fields) and adds it to rep;
// spans, when set, are the writer's snapshots during the plays, which its
// puts then mimic.
func measureLatencyYardstick(ctx context.Context, st *stream, spans *bench.SnapshotSpans, rep *simulateReport, res *settlement.SimResult, plays playsMeasure) error {
	commands := len(res.CommandLatencies)
	if commands == 0 {
		return nil
	}
	y := bench.LatencyYardstick{
		CommandsPerSecond: float64(commands) / res.Elapsed.Seconds(),
		Duration:          min(max(res.Elapsed, latencyYardstickMin), latencyYardstickMax),
		EventsPerCommand:  max(float64(res.Events)/float64(commands), 1), // float-ok: a count's mean
		MessageBytes:      yardstickMessageBytes, Replicas: st.replicas,
	}
	if spans != nil {
		if p := spans.PhaseCPU(plays.began, plays.ended); p.Snapshots > 0 {
			y.PutBytes, y.PutEvery = p.Bytes/p.Snapshots, plays.ended.Sub(plays.began)/time.Duration(p.Snapshots)
			y.PutPace = snapshot.WriterPace.Rate(y.PutBytes)
		}
	}
	f, err := bench.MeasureCommandLatency(ctx, st.store, y)
	if err != nil {
		return fmt.Errorf("yardstick: %w", err)
	}
	p50, p99 := percentilesMs(f.Latencies)
	ratio := rep.CommandP99Ms / p99
	rep.YardstickCommandP50Ms, rep.YardstickCommandP99Ms, rep.CommandP99OverYardstick = &p50, &p99, &ratio
	if len(f.DuringPut) > 0 && len(f.OutsidePut) > 0 {
		_, during := percentilesMs(f.DuringPut)
		_, outside := percentilesMs(f.OutsidePut)
		rep.YardstickPuts, rep.YardstickPutBytes = f.Puts, y.PutBytes
		rep.YardstickDuringPutsP99Ms, rep.YardstickOutsidePutsP99Ms = &during, &outside
	}
	return nil
}

// playsMeasure is what simulate measures over the plays alone: the
// committer's batches, the process's CPU time, and the profiles asked for.
type playsMeasure struct {
	stats        eventstore.CommitterStats
	cpu          time.Duration
	began, ended time.Time
	err          error
}

// cores is cpu over wall, to two decimals; 0 without wall time.
func cores(cpu, wall time.Duration) float64 {
	if wall <= 0 {
		return 0
	}
	return math.Round(cpu.Seconds()/wall.Seconds()*100) / 100
}

// start starts measuring and returns the function that stops.
func (m *playsMeasure) start(log *settlement.EventLog, o simulateOptions) func() {
	var prof *os.File
	if o.cpuProf != "" {
		prof, m.err = os.Create(o.cpuProf)
		if m.err == nil {
			m.err = pprof.StartCPUProfile(prof)
		}
	}
	stats0, cpu0 := log.Stats(), processCPU()
	m.began = time.Now()
	return func() {
		m.cpu, m.ended = processCPU()-cpu0, time.Now()
		s := log.Stats()
		m.stats = eventstore.CommitterStats{Batches: s.Batches - stats0.Batches, Events: s.Events - stats0.Events,
			CommitTime: s.CommitTime - stats0.CommitTime}
		if prof != nil {
			pprof.StopCPUProfile()
			m.err = errors.Join(m.err, prof.Close())
		}
		if o.memProf != "" {
			m.err = errors.Join(m.err, writeHeapProfile(o.memProf))
		}
	}
}

// processCPU is the CPU time (user and system) the process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// writeHeapProfile writes the heap profile, allocations since the start
// included, after a collection so that the live heap is up to date.
func writeHeapProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	runtime.GC()
	return errors.Join(pprof.WriteHeapProfile(f), f.Close())
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// percentilesMs returns the p50 and p99 of sorted latencies, in ms.
func percentilesMs(sorted []time.Duration) (float64, float64) {
	return ms(settlement.Percentile(sorted, 50)), ms(settlement.Percentile(sorted, 99))
}

func (r *simulateReport) print(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "plays\t%d (%d players, %s each)\n", r.Plays, r.Players, r.Price)
	fmt.Fprintf(tw, "stakes\t%s €\n", r.StakesTotal)
	fmt.Fprintf(tw, "prizes\t%s €\n", r.PrizesTotal)
	for _, t := range domain.Tiers {
		fmt.Fprintf(tw, "  %s\t%d\n", t.ID(), r.Tiers[t.ID()])
	}
	fmt.Fprintf(tw, "elapsed\t%.2f s\n", r.ElapsedSeconds)
	fmt.Fprintf(tw, "plays/s\t%.0f\n", r.PlaysPerSecond)
	fmt.Fprintf(tw, "events/s\t%.0f (%.2f events per play, every event durable: %t)\n", r.EventsPerSecond, r.EventsPerPlayAvg, r.SyncEveryWrite)
	fmt.Fprintf(tw, "play latency\tp50 %.2f ms, p99 %.2f ms (stake to settlement, 5 durable commands)\n", r.LatencyP50Ms, r.LatencyP99Ms)
	fmt.Fprintf(tw, "command latency\tp50 %.2f ms, p99 %.2f ms\n", r.CommandP50Ms, r.CommandP99Ms)
	if r.SnapshotsTaken > 0 {
		fmt.Fprintf(tw, "  clicked while a snapshot was taken\tp50 %.2f ms, p99 %.2f ms (%d commands, %d snapshots)\n",
			r.CommandDuringP50Ms, r.CommandDuringP99Ms, r.CommandsDuringSnapshots, r.SnapshotsTaken)
		fmt.Fprintf(tw, "    encoding it\tp50 %.2f ms, p99 %.2f ms\n", r.CommandEncodingP50Ms, r.CommandEncodingP99Ms)
		fmt.Fprintf(tw, "    storing it\tp50 %.2f ms, p99 %.2f ms\n", r.CommandStoringP50Ms, r.CommandStoringP99Ms)
		fmt.Fprintf(tw, "  otherwise\tp50 %.2f ms, p99 %.2f ms\n", r.CommandOutsideP50Ms, r.CommandOutsideP99Ms)
		fmt.Fprintf(tw, "  processors in use (the whole process)\t%.2f while encoding, %.2f while storing, %.2f otherwise\n",
			r.CPUCoresEncoding, r.CPUCoresStoring, r.CPUCoresOutside)
	}
	fmt.Fprintf(tw, "batches\t%d (%.1f events each, %.2f ms to commit on average)\n", r.Batches, r.EventsPerBatch, r.CommitMsAvg)
	fmt.Fprintf(tw, "  a command's time\tqueued p50 %.2f / p99 %.2f ms, in its batch %.2f / %.2f ms, commit %.2f / %.2f ms, outside the log %.2f / %.2f ms\n",
		r.QueuedP50Ms, r.QueuedP99Ms, r.HeldP50Ms, r.HeldP99Ms, r.CommittedP50Ms, r.CommittedP99Ms, r.OutsideP50Ms, r.OutsideP99Ms)
	fmt.Fprintf(tw, "CPU\t%.1f µs per event (the whole process)\n", r.CPUMicrosPerEvent)
	if r.Yardstick != nil {
		fmt.Fprintf(tw, "yardstick\t%.0f events/s in raw 1 000-message atomic batches; Tresor at %.2f of it\n", *r.Yardstick, *r.YardstickRatio)
	}
	if r.YardstickBefore != nil {
		fmt.Fprintf(tw, "yardstick, median of %d rounds\tbefore the plays %.0f events/s (Tresor at %.2f), after %.0f (Tresor at %.2f)\n",
			len(r.YardstickRounds.Before), *r.YardstickBefore, *r.YardstickBeforeRatio, *r.YardstickAfter, *r.YardstickAfterRatio)
	}
	if r.YardstickCommandP99Ms != nil {
		fmt.Fprintf(tw, "yardstick, commands\ta raw writer at the same rate: p50 %.2f ms, p99 %.2f ms; Tresor's p99 at %.2f of it\n",
			*r.YardstickCommandP50Ms, *r.YardstickCommandP99Ms, *r.CommandP99OverYardstick)
	}
	if r.YardstickPuts > 0 {
		fmt.Fprintf(tw, "  while a snapshot's bytes were stored\tp99 %.2f ms (%d stores of %d bytes), otherwise %.2f ms\n",
			*r.YardstickDuringPutsP99Ms, r.YardstickPuts, r.YardstickPutBytes, *r.YardstickOutsidePutsP99Ms)
	}
	for _, b := range r.Blocks {
		fmt.Fprintf(tw, "block %s\t%s, %d sold, %s € paid\n", b.Block, b.State, b.Sold, b.Paid)
	}
	fmt.Fprintf(tw, "books balanced\t%t (%s)\n", r.BooksBalanced, r.BooksDetail)
	fmt.Fprintf(tw, "stream\tlast sequence %d\n", r.StreamLastSeq)
	return tw.Flush()
}
