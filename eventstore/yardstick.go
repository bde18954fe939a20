package eventstore

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
	"github.com/synadia-io/orbit.go/jetstreamext"
)

// Yardstick describes a raw JetStream measurement made on the same server
// as Tresor's own, so that Tresor's rates can be quoted as ratios of it on a
// shared, noisy machine.
type Yardstick struct {
	// Batches of BatchSize messages of MessageBytes each.
	Batches, BatchSize, MessageBytes int
	// Replicas of the scratch stream (the same as Tresor's stream).
	Replicas int
	// Header, when set, goes on every message (the batch's own headers are
	// added to it), so that a run can measure what header bytes cost the
	// server against the bare yardstick (BenchmarkYardstickHeaders).
	Header nats.Header
}

// MeasureAtomicBatches publishes y.Batches raw atomic batches, one at a
// time, into a scratch stream configured like Tresor's (file storage,
// atomic publish allowed) on the server behind nc, and returns the messages
// per second. The scratch stream is deleted afterwards. With the embedded
// server's sync_interval: always, every batch is on disk before its ack:
// this is the most a durable writer can get from the server.
func MeasureAtomicBatches(ctx context.Context, nc *nats.Conn, y Yardstick) (float64, error) {
	if y.Batches < 1 || y.BatchSize < 1 || y.BatchSize > BatchEventsMax || y.MessageBytes < 1 || y.Replicas < 1 {
		return 0, fmt.Errorf("yardstick %+v: %w", y, ErrInvalid)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return 0, fmt.Errorf("yardstick: %w", err)
	}
	id := nuid.Next()
	name := "YARDSTICK_" + id
	st, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name: name, Subjects: []string{"yardstick." + id + ".>"}, Storage: jetstream.FileStorage,
		Replicas: y.Replicas, AllowAtomicPublish: true,
	})
	if err != nil {
		return 0, fmt.Errorf("yardstick: create scratch stream: %w", err)
	}
	defer js.DeleteStream(context.Background(), st.CachedInfo().Config.Name)
	payload := make([]byte, y.MessageBytes)
	msgs := make([]*nats.Msg, y.BatchSize)
	for i := range msgs {
		msgs[i] = &nats.Msg{Subject: fmt.Sprintf("yardstick.%s.%d", id, i%64), Header: y.Header, Data: payload}
	}
	start := time.Now()
	for range y.Batches {
		if _, err := jetstreamext.PublishMsgBatch(ctx, js, msgs, jetstreamext.BatchFlowControl{AckFirst: false}); err != nil {
			return 0, fmt.Errorf("yardstick: publish batch: %w", err)
		}
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
