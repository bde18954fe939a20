package eventstore

import (
	"context"
	"fmt"
	"strconv"
	"time"

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
	// BatchEventsMax the server's max_batch_size must allow it (the
	// embedded server allows CommitBatchEventsMax).
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
	if y.Batches < 1 || y.BatchSize < 1 || y.BatchSize > CommitBatchEventsMax || y.MessageBytes < 1 || y.Replicas < 1 || y.Subjects < 0 ||
		(y.Stream != "" && !validName(y.Stream, NameLenMax, false)) {
		return 0, fmt.Errorf("yardstick %+v: %w", y, ErrInvalid)
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
		cfg = tresorStreamConfig(name, prefix+".>", y.Replicas, 2*time.Minute)
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
				h.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(last, 10))
				h.Set(jetstream.ExpectedLastSubjSeqSubjHeader, prefix+".>")
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
// with an ordered consumer pulling Config.ReadBatchMax at a time, as
// Tresor's readers do, and only counts them: no decoding, no hashing. It
// is the most any reader of that stream gets from the server, the
// yardstick of an audit's rate. It returns messages per second.
func MeasureOrderedRead(ctx context.Context, s *NATSStore, from, to uint64) (float64, error) {
	from = max(from, 1)
	if to < from {
		return 0, fmt.Errorf("yardstick read %d..%d: %w", from, to, ErrInvalid)
	}
	cons, err := s.stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{
		DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: from,
	})
	if err != nil {
		return 0, fmt.Errorf("yardstick read: %w", err)
	}
	it, err := cons.Messages(jetstream.PullMaxMessages(s.cfg.ReadBatchMax))
	if err != nil {
		return 0, fmt.Errorf("yardstick read: %w", err)
	}
	defer it.Stop()
	start := time.Now()
	for {
		m, err := it.Next(jetstream.NextMaxWait(s.cfg.RequestTimeout))
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
