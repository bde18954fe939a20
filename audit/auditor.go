package audit

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"maps"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fdj/tresor/domain"
	"github.com/fdj/tresor/domain/codec"
	"github.com/fdj/tresor/eventstore"
	"github.com/fdj/tresor/projections"
)

// Limits of the pipeline. Batches amortise channel hand-offs; the queue
// bounds how far reading runs ahead of checking, and so the memory held.
const (
	// batchEvents is the number of events decoded by one worker at a time.
	batchEvents = 512
	// jobsPerBatch is the number of pure checks handed to a worker at once.
	jobsPerBatch = 256
	// queueBatches bounds the batches in flight between the stages.
	queueBatches = 64
	// ViolationsMaxDefault is how many violations a report lists by default.
	ViolationsMaxDefault = 100
	// WorkersMax bounds Config.Workers.
	WorkersMax = 256
	// SealGapMaxDefault is the longest run of a chain without a seal an
	// audit accepts: ten times the committer's default cadence. The
	// committer seals after 10 000 events only once it is between batches,
	// which a busy writer delays (runs well past the cadence occur over
	// sold-out blocks), so the bound leaves room; a rewrite without the
	// key of anything larger, a sold-out block to start with, is caught.
	SealGapMaxDefault = 100_000
)

// Config configures an Auditor.
type Config struct {
	// Rules is the rule set the stream was written under (required).
	Rules *domain.RuleSet
	// PublicKey is the operator's Ed25519 seal key. Without it every seal
	// is reported: a seal nobody can verify proves nothing.
	PublicKey ed25519.PublicKey
	// ViolationsMax is how many violations the report lists, the first by
	// stream sequence; all are counted (ViolationsMaxDefault when 0).
	ViolationsMax int
	// Workers decode events and run the pure checks (GOMAXPROCS when 0).
	Workers int
	// SealGapMax is the most events of a chain allowed between two valid
	// seals, and after the last one (SealGapMaxDefault when 0): set it
	// from the committer's SealEvery when the operator changed it.
	SealGapMax uint64
	// ReadModels, when set, receives every event in stream order, as a
	// projection would, so that the read models the replay derives can be
	// compared with the operator's (CompareReadModels). Only from the
	// first event: a projection cannot start mid-stream.
	ReadModels projections.Store
}

// Auditor checks a stream fed to it event by event, in stream order, with
// Check; Finish waits for the last checks and returns the report. Check and
// Finish must be called from one goroutine; decoding and pure checks run on
// Config.Workers more.
type Auditor struct {
	cfg      Config
	verifier *eventstore.Verifier
	vs       *violations
	st       *state
	started  time.Time
	fromSeal uint64

	cur     *batch
	order   chan *batch
	free    chan *batch
	work    chan worker
	seqDone chan struct{}
	workers sync.WaitGroup
	done    bool
	// jobs counts the batches of pure checks handed to the workers and not
	// yet run, which a round waits for; rounded is the last round's report
	// until the next event is fed.
	jobs    sync.WaitGroup
	rounded *Report

	rm       readModels
	compared bool
	// resumed is the state a resumed audit started from; startEvents its
	// events, so that the rate counts only this run's.
	resumed     *State
	startEvents uint64
	// eventViolations are the violations found by the events, before the
	// checks of the stream as a whole: what a state saves.
	eventViolations savedViolations
	// checked counts the events checked so far, for progress reports.
	checked atomic.Uint64
	// tornAt is the first sequence of a torn append at the source's end
	// (Torn), 0 for none.
	tornAt uint64
}

// worker is a unit of parallel work: a batch to decode or pure checks.
type worker interface{ run(a *Auditor) }

// New returns an auditor that verifies from the first event of the stream.
func New(cfg Config) (*Auditor, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return newAuditor(cfg, eventstore.NewVerifier(cfg.PublicKey), false), nil
}

// NewFromSeal returns an auditor that starts trusting the stream at a
// seal, and the stream sequence to feed it from (the sealed head). The seal
// must be the raw Seal event and verify with Config.PublicKey; a bad seal is
// an error wrapping eventstore.ErrIntegrity. From a seal, the chain and the
// seals are verified from the sealed head on, and the semantic checks cover
// what starts after it: blocks opened after the head in full, plays staked
// after it in full, balances relative to each account's first balance seen.
// Events about blocks and plays that began before it are skipped and
// counted (docs/audit.md, "Auditing from a seal").
func NewFromSeal(cfg Config, seal eventstore.RecordedEvent) (*Auditor, uint64, error) {
	if err := cfg.validate(); err != nil {
		return nil, 0, err
	}
	if cfg.ReadModels != nil {
		return nil, 0, errors.New("audit: read models are rebuilt from the first event, not from a seal")
	}
	v, from, err := eventstore.StartAt(seal, cfg.PublicKey)
	if err != nil {
		return nil, 0, fmt.Errorf("audit from the seal at sequence %d: %w", seal.Sequence, err)
	}
	a := newAuditor(cfg, v, true)
	a.fromSeal = seal.Sequence
	return a, from, nil
}

func (c *Config) validate() error {
	if c.Rules == nil {
		return errors.New("audit: no rule set")
	}
	if c.ViolationsMax == 0 {
		c.ViolationsMax = ViolationsMaxDefault
	}
	if c.Workers == 0 {
		c.Workers = runtime.GOMAXPROCS(0)
	}
	if c.SealGapMax == 0 {
		c.SealGapMax = SealGapMaxDefault
	}
	if c.ViolationsMax < 1 || c.Workers < 1 || c.Workers > WorkersMax {
		return fmt.Errorf("audit: violations max %d, workers %d: want ≥ 1 and 1..%d workers", c.ViolationsMax, c.Workers, WorkersMax)
	}
	if c.PublicKey != nil && len(c.PublicKey) != ed25519.PublicKeySize {
		return fmt.Errorf("audit: public key of %d bytes, want %d", len(c.PublicKey), ed25519.PublicKeySize)
	}
	return nil
}

func newAuditor(cfg Config, v *eventstore.Verifier, partial bool) *Auditor {
	a := allocAuditor(cfg, v, partial)
	a.start()
	return a
}

// allocAuditor returns an auditor whose stages are not started yet, so
// that a saved state can be loaded into it first.
func allocAuditor(cfg Config, v *eventstore.Verifier, partial bool) *Auditor {
	a := &Auditor{
		cfg:      cfg,
		verifier: v,
		vs:       newViolations(cfg.ViolationsMax),
		started:  time.Now(),
		order:    make(chan *batch, queueBatches),
		free:     make(chan *batch, queueBatches),
		work:     make(chan worker, queueBatches),
		seqDone:  make(chan struct{}),
	}
	a.st = newState(a, partial)
	return a
}

// start starts the workers and the ordered checks.
func (a *Auditor) start() {
	for range a.cfg.Workers {
		a.workers.Add(1)
		go func() {
			defer a.workers.Done()
			for w := range a.work {
				w.run(a)
			}
		}()
	}
	go a.sequential()
}

// batch is a run of consecutive events, decoded in parallel and then
// checked in order.
type batch struct {
	events  []eventstore.RecordedEvent
	decoded []decoded
	// hashed says, by index, which events a checked read hashed already
	// (CheckHashed).
	hashed []bool
	// unread holds, by index, the messages the source could not read.
	unread map[int]*Violation
	done   chan struct{}
	// synced, on a batch of no events that Round sends, is closed once
	// every batch before it is checked.
	synced chan struct{}
}

// decoded is an event's domain payload, or why it could not be read, and
// its hash computed from its bytes.
type decoded struct {
	event domain.Event
	bad   *Violation
	hash  eventstore.Hash
}

// newBatch returns an empty batch, a checked one recycled when there is
// one: batches are the largest allocation per event otherwise.
func (a *Auditor) newBatch() *batch {
	select {
	case b := <-a.free:
		return b
	default:
		return &batch{events: make([]eventstore.RecordedEvent, 0, batchEvents), decoded: make([]decoded, 0, batchEvents),
			hashed: make([]bool, 0, batchEvents), done: make(chan struct{})}
	}
}

// recycle empties a checked batch, dropping its references so that what
// it held can be collected, and keeps it for reuse.
func (a *Auditor) recycle(b *batch) {
	clear(b.events)
	clear(b.decoded)
	*b = batch{events: b.events[:0], decoded: b.decoded[:0], hashed: b.hashed[:0], done: make(chan struct{})}
	select {
	case a.free <- b:
	default:
	}
}

// Check feeds the next event of the stream, raw as stored (an export, or a
// store opened without a Registry: upcast payloads no longer match their
// hashes). It blocks while the checks are too far behind.
func (a *Auditor) Check(ev eventstore.RecordedEvent) { a.push(ev, nil, false) }

// CheckHashed is Check for an event of a checked read (eventstore's
// Follow, ReadFrom), which compared its stated hash with the one computed
// from its bytes already: the auditor takes that hash as computed rather
// than computing it a second time, and verifies the event's links, its
// chain and the seals from it as Check does.
func (a *Auditor) CheckHashed(ev eventstore.RecordedEvent) { a.push(ev, nil, true) }

// Unreadable records a message of the source that could not be read as an
// event (the store refused its headers): it counts as a violation at its
// sequence, and the audit goes on past it.
func (a *Auditor) Unreadable(v Violation) {
	a.push(eventstore.RecordedEvent{Sequence: v.Sequence}, &v, false)
}

// push adds an event, or the place of an unreadable one, to the batch being
// filled, and hands the batch on once full.
func (a *Auditor) push(ev eventstore.RecordedEvent, unread *Violation, hashed bool) {
	a.rounded = nil
	if a.cur == nil {
		a.cur = a.newBatch()
	}
	if unread != nil {
		if a.cur.unread == nil {
			a.cur.unread = map[int]*Violation{}
		}
		a.cur.unread[len(a.cur.events)] = unread
	}
	a.cur.events = append(a.cur.events, ev)
	a.cur.hashed = append(a.cur.hashed, hashed)
	if len(a.cur.events) == batchEvents {
		a.dispatch()
	}
}

func (a *Auditor) dispatch() {
	b := a.cur
	a.cur = nil
	a.order <- b
	a.work <- b
}

// run decodes a batch: the part of reading an event that needs no state.
func (b *batch) run(*Auditor) {
	b.decoded = b.decoded[:len(b.events)]
	for i := range b.events {
		if v, ok := b.unread[i]; ok {
			b.decoded[i].bad = v
			continue
		}
		b.decoded[i] = decode(&b.events[i])
		if b.hashed[i] {
			b.decoded[i].hash = b.events[i].Hash
		} else {
			b.decoded[i].hash = eventstore.ComputeHash(&b.events[i])
		}
	}
	close(b.done)
}

// decode reads an event's domain payload and checks that its envelope
// agrees with it.
func decode(ev *eventstore.RecordedEvent) decoded {
	if !ev.LedgerFact() {
		return decoded{}
	}
	bad := func(expected, found string) decoded {
		return decoded{bad: &Violation{Sequence: ev.Sequence, Code: CodeMalformedEvent, Subject: ev.Type + " " + ev.Aggregate.String(),
			Expected: expected, Found: found}}
	}
	v, ok := domain.SchemaVersion[ev.Type]
	if !ok {
		return bad("a known event type", ev.Type)
	}
	// Every older version of a domain event only lacks optional fields of
	// the current one (docs/events.md, "Schema versions"), so the current
	// decoder reads them all.
	if ev.SchemaVersion < 1 || ev.SchemaVersion > uint32(v) {
		return bad(fmt.Sprintf("schema version 1 to %d", v), fmt.Sprint(ev.SchemaVersion))
	}
	e, ok := codec.FastDecodeEvent(ev.Type, ev.Payload)
	if !ok {
		var err error
		if e, err = domain.DecodeEvent(ev.Type, ev.Payload); err != nil {
			return bad("a payload of its type", err.Error())
		}
	}
	if agg := e.AggregateID(); !sameAggregate(agg, ev.Aggregate) {
		return bad("aggregate "+agg, ev.Aggregate.String())
	}
	return decoded{event: e}
}

// sameAggregate compares "kind.id" with an aggregate without building the
// string.
func sameAggregate(s string, agg eventstore.Aggregate) bool {
	k := len(agg.Kind)
	return len(s) == k+1+len(agg.ID) && s[:k] == agg.Kind && s[k] == '.' && s[k+1:] == agg.ID
}

// sequential checks batches in stream order as their decoding completes.
func (a *Auditor) sequential() {
	defer close(a.seqDone)
	for b := range a.order {
		<-b.done
		if b.synced != nil {
			a.st.flushJobs()
			close(b.synced)
			continue
		}
		for i := range b.events {
			a.st.apply(&b.events[i], &b.decoded[i])
		}
		a.checked.Add(uint64(len(b.events)))
		a.recycle(b)
	}
	a.st.flushJobs()
	if a.cfg.ReadModels != nil {
		a.flushReadModels()
	}
}

// Torn reports the events of an append cut short at the end of the
// source, with no Void after them (eventstore.WholeAppends): an
// append_torn violation. They are not checked, so that an incremental
// audit's state ends before them and the next audit reads them with the
// Void the writer adds.
func (a *Auditor) Torn(torn []eventstore.RecordedEvent) {
	if len(torn) == 0 {
		return
	}
	a.rounded = nil
	a.tornAt = torn[0].Sequence
	a.vs.add(Violation{Sequence: torn[0].Sequence, Code: CodeAppendTorn, Subject: "chain " + torn[0].Chain,
		Expected: fmt.Sprintf("the %d events its first event announces, or a Void after them", torn[0].AppendRemaining+1),
		Found:    fmt.Sprintf("the stream ends after %d of them", len(torn))})
}

// brokenAppend reports an append cut short before another begins, or a
// Void that names no torn append: the events go on to the checks as they
// are.
func (a *Auditor) brokenAppend(err *eventstore.IntegrityError) {
	a.vs.add(Violation{Sequence: err.Sequence, Code: CodeAppendTorn, Subject: err.What, Expected: err.Expected, Found: err.Found})
}

// Truncated reports a stream that ends at sequence end (before a torn
// append at its end, if Torn found one), short of what evidence names: a
// stream_truncated violation for each piece.
func (a *Auditor) Truncated(end uint64, evidence []eventstore.Evidence) {
	a.rounded = nil
	if a.tornAt != 0 {
		end = min(end, a.tornAt-1)
	}
	for _, ev := range evidence {
		if ev.Head.Sequence <= end {
			continue
		}
		a.vs.add(Violation{Sequence: ev.Head.Sequence, Code: CodeStreamTruncated, Subject: "stream",
			Expected: fmt.Sprintf("the events up to sequence %d, as %s names", ev.Head.Sequence, ev.Source),
			Found:    fmt.Sprintf("the stream ends at %d: %d acknowledged missing", end, ev.Head.Sequence-end)})
	}
}

// Checked returns how many events were checked so far; safe to call from
// any goroutine, for progress reports.
func (a *Auditor) Checked() uint64 { return a.checked.Load() }

// Round waits for every check of the events fed so far and returns the
// report Finish would return now, the checks of the stream as a whole
// included, without ending the audit: more events may be fed after it, and
// State may be taken before they are. It costs what those checks do, where
// Finish, State and Resume rebuild the whole state, so that a follower may
// end a round at every seal. Not with Config.ReadModels, which only Finish
// completes.
func (a *Auditor) Round() (*Report, error) {
	if a.cfg.ReadModels != nil {
		return nil, errors.New("audit: read models are compared after Finish, not after a round")
	}
	if a.done {
		return a.report(), nil
	}
	if a.rounded != nil {
		// The violations of the stream's whole checks are the report's
		// only: the auditor's own were set back without them.
		return a.rounded, nil
	}
	if a.cur != nil {
		a.dispatch()
	}
	synced := make(chan struct{})
	a.order <- &batch{done: closed, synced: synced}
	<-synced
	a.jobs.Wait()
	// The stream's whole checks report on the stream as it ends now: they
	// run again at the next round, so that their violations are the
	// report's, never the state's.
	a.eventViolations = a.vs.save()
	a.st.finish()
	r := a.report()
	a.vs.total, a.vs.byCode, a.vs.kept = a.eventViolations.Total, maps.Clone(a.eventViolations.Counts), slices.Clone(a.eventViolations.Kept)
	a.rounded = r
	return r, nil
}

// closed is a channel closed from the start: a batch Round sends has
// nothing to decode.
var closed = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// LastSealed returns the chain position of the last valid seal of chain
// the auditor verified (0: none), once the checks are done: after Finish
// or Round, before more events are fed.
func (a *Auditor) LastSealed(chain string) uint64 { return a.st.sealedAt[chain] }

// Finish waits for every check of the events fed, runs the checks of the
// stream as a whole and returns the report. The auditor is unusable
// afterwards.
func (a *Auditor) Finish() *Report {
	if !a.done {
		a.done = true
		if a.cur != nil {
			a.dispatch()
		}
		close(a.order)
		<-a.seqDone
		close(a.work)
		a.workers.Wait()
		a.eventViolations = a.vs.save()
		a.st.finish()
	}
	return a.report()
}
