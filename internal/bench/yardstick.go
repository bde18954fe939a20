// Package bench holds Tresor's measurement machinery, kept apart from the
// product's packages: the raw JetStream yardsticks that Tresor's rates and
// latencies are quoted against, and the recording of the writer's
// snapshots that tresor simulate splits its latencies by. Nothing in the
// product imports it; cmd/tresor wires it for simulate, audit --yardstick
// and the benchmarks.
package bench

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/fdj/tresor/eventstore"
	"github.com/fdj/tresor/snapshot"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
	"github.com/synadia-io/orbit.go/jetstreamext"
)

// Yardstick describes a raw JetStream measurement made on the same server
// as Tresor's own, so that Tresor's rates can be quoted as ratios of it on a
// shared, noisy machine. The zero values of the fields after Header give
// the bare yardstick; each of them adds one thing Tresor's stream does, so
// that a benchmark can measure what each costs the server
// (BenchmarkYardstickStream).
type Yardstick struct {
	// Batches of BatchSize messages of MessageBytes each. Above
	// eventstore.BatchEventsMax the server's max_batch_size must allow it (the
	// embedded server allows eventstore.CommitBatchEventsMax).
	Batches, BatchSize, MessageBytes int
	// Replicas of the scratch stream (the same as Tresor's stream).
	Replicas int
	// Header, when set, goes on every message (the batch's own headers are
	// added to it), so that a run can measure what header bytes cost the
	// server against the bare yardstick (BenchmarkYardstickHeaders).
	Header nats.Header
	// Subjects, when set, spreads the messages over this many subjects as
	// a sell-out spreads its events over the players' subjects: one
	// command's one to three events on one subject, the next command on
	// another player's. 0 is the bare yardstick's 64 subjects, the same
	// ones in every batch.
	Subjects int
	// Fence puts on each batch's first message the committer's fence: the
	// expected last sequence of the wildcard subject covering the whole
	// stream (Nats-Expected-Last-Subject-Sequence with its -Subject
	// header), the sequence the previous batch ended on.
	Fence bool
	// MsgID puts a Nats-Msg-Id on each batch's first message, as the
	// committer does, so that the server records it for dedupe.
	MsgID bool
	// LikeTresor creates the stream with Tresor's own configuration
	// (retention, discard, duplicate window, deny delete and purge).
	LikeTresor bool
	// Stream, when set, publishes into the stream of that name, created
	// if it does not exist and kept afterwards, so that a measurement can
	// run on a stream that already holds millions of messages. Empty uses a
	// scratch stream deleted afterwards.
	Stream string
}

// yardstickSubjectsDefault is the bare yardstick's subject count.
const yardstickSubjectsDefault = 64

// MeasureAtomicBatches publishes y.Batches raw atomic batches, one at a
// time, into a scratch stream configured like Tresor's (file storage,
// atomic publish allowed) on the server behind nc, and returns the messages
// per second. The scratch stream is deleted afterwards. With the embedded
// server's sync_interval: always, every batch is on disk before its ack:
// this is the most a durable writer can get from the server.
func MeasureAtomicBatches(ctx context.Context, nc *nats.Conn, y Yardstick) (float64, error) {
	if y.Batches < 1 || y.BatchSize < 1 || y.BatchSize > eventstore.CommitBatchEventsMax || y.MessageBytes < 1 || y.Replicas < 1 || y.Subjects < 0 ||
		(y.Stream != "" && !validStreamName(y.Stream)) {
		return 0, fmt.Errorf("yardstick %+v: %w", y, eventstore.ErrInvalid)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return 0, fmt.Errorf("yardstick: %w", err)
	}
	id, name := y.Stream, y.Stream
	if id == "" {
		id = nuid.Next()
		name = "YARDSTICK_" + id
	}
	prefix := "yardstick." + id
	cfg := jetstream.StreamConfig{
		Name: name, Subjects: []string{prefix + ".>"}, Storage: jetstream.FileStorage,
		Replicas: y.Replicas, AllowAtomicPublish: true,
	}
	if y.LikeTresor {
		cfg = eventstore.TresorStreamConfig(name, prefix+".>", y.Replicas, 2*time.Minute)
	}
	st, err := js.CreateOrUpdateStream(ctx, cfg)
	if err != nil {
		return 0, fmt.Errorf("yardstick: create scratch stream: %w", err)
	}
	if y.Stream == "" {
		defer js.DeleteStream(context.Background(), name)
	}
	subjects := y.Subjects
	if subjects == 0 {
		subjects = yardstickSubjectsDefault
	}
	names := make([]string, subjects)
	for i := range names {
		names[i] = fmt.Sprintf("%s.p.%d", prefix, i)
	}
	payload := make([]byte, y.MessageBytes)
	msgs := make([]*nats.Msg, y.BatchSize)
	for i := range msgs {
		msgs[i] = &nats.Msg{Subject: names[i%subjects], Header: y.Header, Data: payload}
	}
	last := st.CachedInfo().State.LastSeq // the fence: only this yardstick writes the stream
	var sent uint64
	start := time.Now()
	for range y.Batches {
		if y.Subjects > 0 {
			for i, m := range msgs {
				// Runs of two and one messages (a command's events, 1.45 on
				// average in a sell-out), each run on another subject: 7919
				// is a prime, so consecutive runs land far apart and every
				// subject comes round.
				m.Subject = names[int((sent+uint64(i))*2/3*7919%uint64(subjects))]
			}
		}
		if y.Fence || y.MsgID {
			h := nats.Header{}
			for k, v := range y.Header {
				h[k] = v
			}
			if y.Fence {
				setFence(h, last, prefix+".>")
			}
			if y.MsgID {
				h.Set(jetstream.MsgIDHeader, nuid.Next())
			}
			msgs[0].Header = h
		}
		ack, err := jetstreamext.PublishMsgBatch(ctx, js, msgs, jetstreamext.BatchFlowControl{AckFirst: false})
		if err != nil {
			return 0, fmt.Errorf("yardstick: publish batch: %w", err)
		}
		last = ack.Sequence
		sent += uint64(len(msgs))
	}
	return float64(y.Batches*y.BatchSize) / time.Since(start).Seconds(), nil // float-ok: a rate
}

// MeasureOrderedRead reads the messages from..to of the stream behind s
// with an ordered consumer pulling eventstore.Config.ReadBatchMax at a time, as
// Tresor's readers do, and only counts them: no decoding, no hashing. It
// is the most any reader of that stream gets from the server, the
// yardstick of an audit's rate. It returns messages per second.
func MeasureOrderedRead(ctx context.Context, s *eventstore.NATSStore, from, to uint64) (float64, error) {
	from = max(from, 1)
	if to < from {
		return 0, fmt.Errorf("yardstick read %d..%d: %w", from, to, eventstore.ErrInvalid)
	}
	cfg := s.Config()
	cons, err := s.Stream().OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{
		DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: from,
	})
	if err != nil {
		return 0, fmt.Errorf("yardstick read: %w", err)
	}
	it, err := cons.Messages(jetstream.PullMaxMessages(cfg.ReadBatchMax))
	if err != nil {
		return 0, fmt.Errorf("yardstick read: %w", err)
	}
	defer it.Stop()
	start := time.Now()
	for {
		m, err := it.Next(jetstream.NextMaxWait(cfg.RequestTimeout))
		if err != nil {
			return 0, fmt.Errorf("yardstick read: %w", err)
		}
		md, err := m.Metadata()
		if err != nil {
			return 0, fmt.Errorf("yardstick read: %w", err)
		}
		if md.Sequence.Stream >= to {
			break
		}
	}
	return float64(to-from+1) / time.Since(start).Seconds(), nil // float-ok: a rate
}

// validStreamName accepts the names the store accepts for its stream:
// ASCII letters, digits, '_' and '-', 1..eventstore.NameLenMax bytes.
func validStreamName(name string) bool {
	if name == "" || len(name) > eventstore.NameLenMax {
		return false
	}
	for _, c := range []byte(name) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// setFence puts the committer's fence on h: the batch commits only if the
// last sequence on subjects (a wildcard covering the whole stream) is last.
func setFence(h nats.Header, last uint64, subjects string) {
	h.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(last, 10))
	h.Set(jetstream.ExpectedLastSubjSeqSubjHeader, subjects)
}

// LatencyYardstick describes a raw writer on the same server as Tresor's,
// under the open-loop load a Tresor run carried, so that a command's
// latency can be quoted over the server's own: what any writer gets from
// this server, at this rate, on this machine, in this minute. The writer
// does nothing but publish: commands arrive at even intervals, and each
// time the previous batch is acknowledged every command that has arrived
// goes as one atomic batch (at most eventstore.BatchEventsMax messages), fenced as
// the committer fences, so at depth 1 a command waits for the batch in
// flight and then for its own, as Tresor's do. A command's latency counts
// from when it was due, as simulate's --rate does.
type LatencyYardstick struct {
	// CommandsPerSecond arrive for Duration, at even intervals.
	CommandsPerSecond float64
	Duration          time.Duration
	// EventsPerCommand is the commands' mean size in messages (at least
	// 1): command k holds floor((k+1)m) - floor(km) of them, so that any
	// stretch of commands averages m. Messages are MessageBytes each.
	EventsPerCommand float64
	MessageBytes     int
	// Replicas of the scratch stream (the same as Tresor's stream).
	Replicas int
	// PutBytes, when above 0, stores an object of that many bytes every
	// PutEvery in a scratch bucket made as the snapshot bucket is, in
	// chunks of snapshot.ChunkBytesDefault at PutPace bytes a second
	// (default snapshot.DefaultPace; the writer's snapshots go at
	// snapshot.WriterPace): a writer snapshot's store with no
	// writer, so that the commands' latency while it goes can be told from
	// outside it.
	PutBytes int
	PutEvery time.Duration
	PutPace  int
}

// LatencyFloor is what a LatencyYardstick measured: every command's
// latency, sorted, and the same split by whether the command arrived
// while an object was being put.
type LatencyFloor struct {
	Latencies             []time.Duration
	DuringPut, OutsidePut []time.Duration
	Batches, Puts         int
}

// MeasureCommandLatency runs y on the server behind s: a scratch stream
// with Tresor's configuration (and a scratch bucket for the puts), deleted
// afterwards.
func MeasureCommandLatency(ctx context.Context, s *eventstore.NATSStore, y LatencyYardstick) (LatencyFloor, error) {
	if y.CommandsPerSecond <= 0 || y.Duration <= 0 || y.EventsPerCommand < 1 || y.EventsPerCommand >= eventstore.BatchEventsMax ||
		y.MessageBytes < 1 || y.Replicas < 1 || y.PutBytes < 0 || (y.PutBytes > 0 && y.PutEvery <= 0) {
		return LatencyFloor{}, fmt.Errorf("latency yardstick %+v: %w", y, eventstore.ErrInvalid)
	}
	interval := time.Duration(float64(time.Second) / y.CommandsPerSecond) // float-ok: a duration
	commands := int(y.Duration / max(interval, 1))
	if commands < 1 {
		return LatencyFloor{}, fmt.Errorf("latency yardstick %+v: no command within the duration: %w", y, eventstore.ErrInvalid)
	}
	id := nuid.Next()
	name, prefix := "YARDSTICK_"+id, "yardstick."+id
	// A JetStream context as the store's own, with its request timeout.
	js, err := jetstream.New(s.Conn(), jetstream.WithDefaultTimeout(s.Config().RequestTimeout))
	if err != nil {
		return LatencyFloor{}, fmt.Errorf("latency yardstick: %w", err)
	}
	st, err := js.CreateStream(ctx, eventstore.TresorStreamConfig(name, prefix+".>", y.Replicas, 2*time.Minute))
	if err != nil {
		return LatencyFloor{}, fmt.Errorf("latency yardstick: create scratch stream: %w", err)
	}
	defer js.DeleteStream(context.Background(), name)
	var puts *yardstickPuts
	if y.PutBytes > 0 {
		bucket, err := snapshot.OpenObjectStore(ctx, s, name, y.Replicas)
		if err != nil {
			return LatencyFloor{}, fmt.Errorf("latency yardstick: create scratch bucket: %w", err)
		}
		defer js.DeleteObjectStore(context.Background(), name)
		putCtx, cancel := context.WithCancel(ctx)
		puts = &yardstickPuts{cancel: cancel, done: make(chan error, 1)}
		go puts.run(putCtx, bucket, y)
		defer puts.stop()
	}
	subjects := make([]string, 2000) // a sell-out's players
	for i := range subjects {
		subjects[i] = fmt.Sprintf("%s.player.%d", prefix, i)
	}
	payload := make([]byte, y.MessageBytes)
	eventsBefore := func(k int) int { return int(float64(k) * y.EventsPerCommand) } // float-ok: a count's mean
	var f LatencyFloor
	f.Latencies = make([]time.Duration, 0, commands) // in the commands' order until sorted
	last := st.CachedInfo().State.LastSeq
	msgs := make([]*nats.Msg, 0, eventstore.BatchEventsMax)
	start := time.Now()
	due := func(k int) time.Time { return start.Add(time.Duration(k) * interval) }
	for next := 0; next < commands; {
		if wait := time.Until(due(next)); wait > 0 {
			time.Sleep(wait)
		}
		// Every command due by now, within one batch.
		end := min(int(time.Since(start)/interval)+1, commands)
		for end > next+1 && eventsBefore(end)-eventsBefore(next) > eventstore.BatchEventsMax {
			end--
		}
		msgs = msgs[:0]
		for e := eventsBefore(next); e < eventsBefore(end); e++ {
			msgs = append(msgs, &nats.Msg{Subject: subjects[e%len(subjects)], Data: payload})
		}
		msgs[0].Header = nats.Header{}
		setFence(msgs[0].Header, last, prefix+".>")
		ack, err := jetstreamext.PublishMsgBatch(ctx, js, msgs, jetstreamext.BatchFlowControl{AckFirst: false})
		if err != nil {
			return LatencyFloor{}, fmt.Errorf("latency yardstick: publish batch: %w", err)
		}
		last = ack.Sequence
		acked := time.Now()
		for k := next; k < end; k++ {
			f.Latencies = append(f.Latencies, acked.Sub(due(k)))
		}
		f.Batches++
		next = end
	}
	if puts != nil {
		spans, err := puts.stop()
		if err != nil {
			return LatencyFloor{}, fmt.Errorf("latency yardstick: put: %w", err)
		}
		f.Puts = len(spans)
		for k, l := range f.Latencies {
			at := due(k)
			if slices.ContainsFunc(spans, func(sp [2]time.Time) bool { return !at.Before(sp[0]) && at.Before(sp[1]) }) {
				f.DuringPut = append(f.DuringPut, l)
			} else {
				f.OutsidePut = append(f.OutsidePut, l)
			}
		}
		slices.Sort(f.DuringPut)
		slices.Sort(f.OutsidePut)
	}
	slices.Sort(f.Latencies)
	return f, nil
}

// yardstickPuts stores a LatencyYardstick's objects and records when each
// store ran.
type yardstickPuts struct {
	cancel context.CancelFunc
	done   chan error
	spans  [][2]time.Time // written by run, read once it is done
}

// run puts an object of y.PutBytes every y.PutEvery until ctx ends, the
// first after half of it, so that the puts fall in the middle of their
// periods (one put over a run of one period lands in the middle of the
// commands, not at their end); a put cut short by the end still counts
// as a span, up to its end.
func (p *yardstickPuts) run(ctx context.Context, bucket jetstream.ObjectStore, y LatencyYardstick) {
	data := make([]byte, y.PutBytes)
	next := time.Now().Add(y.PutEvery / 2)
	t := time.NewTimer(time.Until(next))
	defer t.Stop()
	for i := 0; ; i++ {
		select {
		case <-t.C:
		case <-ctx.Done():
			p.done <- nil
			return
		}
		began := time.Now()
		meta := jetstream.ObjectMeta{Name: "put." + strconv.Itoa(i), Opts: &jetstream.ObjectMetaOptions{ChunkSize: snapshot.ChunkBytesDefault}}
		_, err := bucket.Put(ctx, meta, snapshot.NewPacedReader(ctx, cmp.Or(y.PutPace, snapshot.DefaultPace.BytesPerSecond), data))
		p.spans = append(p.spans, [2]time.Time{began, time.Now()})
		if ctx.Err() != nil {
			err = nil
		}
		if err != nil || ctx.Err() != nil {
			p.done <- err
			return
		}
		next = next.Add(y.PutEvery)
		t.Reset(max(time.Until(next), 0))
	}
}

// stop ends run and returns the spans of its puts; called again, it
// returns nothing.
func (p *yardstickPuts) stop() ([][2]time.Time, error) {
	p.cancel()
	err, ok := <-p.done
	if !ok {
		return nil, nil
	}
	close(p.done)
	return p.spans, err
}
