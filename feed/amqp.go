package feed

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wamqp "github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	"github.com/ThreeDotsLabs/watermill/message"
	amqp "github.com/rabbitmq/amqp091-go"
)

// exchangePattern is what --exchange accepts (AMQP's exchange name
// characters, and not a reserved amq. name).
var exchangePattern = regexp.MustCompile(`^[A-Za-z0-9_.:-]{1,200}$`)

// AMQPTarget publishes to a RabbitMQ exchange through watermill-amqp's
// publisher, and keeps the feed's checkpoint in the same broker.
//
// Topology, declared at every connection:
//   - the exchange (--exchange), durable, of type headers: every message
//     carries its kind, player and block as headers, so that a queue binds
//     to one kind or one player; one publish carries a whole batch;
//   - <exchange>.unrouted, a fanout exchange and a durable queue, as the
//     exchange's alternate exchange: a message that no queue takes is kept
//     there, never dropped;
//   - tresor.feed.<name>.checkpoint, a durable queue holding one message,
//     the checkpoint (the newest drops the older, x-max-length 1);
//   - tresor.feed.<name>.lock, an exclusive queue held while the feed is
//     connected: a second feed of the same name is refused.
//
// Batches are published on one channel in confirm mode, every message of
// the batch sent before any confirm is awaited (confirmPublisher): once
// RabbitMQ has confirmed them all, it holds every message, persistent, in
// its durable queues; a queue that refuses one nacks it. Only then is the
// checkpoint published, on the same channel; its confirm is awaited with
// the next batch's (or at Close), so a batch costs one wait for the
// broker's disk instead of two. A crash before that confirm resumes one
// batch earlier: duplicates, never a gap (docs/feed.md).
type AMQPTarget struct {
	url, exchange, name string
	conn                *wamqp.ConnectionWrapper
	pub                 *confirmPublisher
	ctl                 *amqp.Channel
	// checkpoint is the last checkpoint published and not yet confirmed.
	checkpoint *amqp.DeferredConfirmation
	// connected is set once a connection has held the lock: a later lock
	// refused is a dead connection's queue not yet dropped, retried.
	connected bool
}

// NewAMQPTarget returns a target for exchange on the broker at url, for
// the feed name. It connects on first use.
func NewAMQPTarget(url, exchange, name string) (*AMQPTarget, error) {
	if !exchangePattern.MatchString(exchange) || len(exchange) >= 4 && exchange[:4] == "amq." {
		return nil, fmt.Errorf("exchange %q: want 1 to 200 of A-Z a-z 0-9 _ . : -, not starting with amq.", exchange)
	}
	return &AMQPTarget{url: url, exchange: exchange, name: name}, nil
}

// UnroutedQueue is the queue that keeps messages no other queue takes.
func UnroutedQueue(exchange string) string { return exchange + ".unrouted" }

func (t *AMQPTarget) checkpointQueue() string { return "tresor.feed." + t.name + ".checkpoint" }
func (t *AMQPTarget) lockQueue() string       { return "tresor.feed." + t.name + ".lock" }

// publisherConfig is the watermill configuration of the feed's
// publisher: persistent messages whose AMQP message id is the UUID, to the
// headers exchange. The feed publishes with it through confirmPublisher,
// on one channel in confirm mode.
func publisherConfig(url, exchange string) wamqp.Config {
	return wamqp.Config{
		Connection: wamqp.ConnectionConfig{AmqpURI: url},
		Marshaler: wamqp.DefaultMarshaler{PostprocessPublishing: func(p amqp.Publishing) amqp.Publishing {
			p.MessageId, _ = p.Headers[wamqp.DefaultMessageUUIDHeaderKey].(string)
			p.Type, _ = p.Headers["kind"].(string)
			p.ContentType = "application/json"
			return p
		}},
		Exchange: wamqp.ExchangeConfig{GenerateName: wamqp.GenerateExchangeNameConstant(exchange), Type: amqp.ExchangeHeaders,
			Durable: true, Arguments: amqp.Table{"alternate-exchange": UnroutedQueue(exchange)}},
		Publish: wamqp.PublishConfig{
			GenerateRoutingKey: func(topic string) string { return topic },
			ChannelPoolSize:    1,
		},
		TopologyBuilder: &wamqp.DefaultTopologyBuilder{},
	}
}

// NewAMQPPublisher returns the watermill publisher the feed uses, on its
// own connection, which its Close closes, for a yardstick: the same
// configuration, the same topology, the same confirms.
func NewAMQPPublisher(url, exchange string) (message.Publisher, error) {
	conn, err := amqp.Dial(url)
	if err != nil {
		return nil, err
	}
	p, err := func() (*confirmPublisher, error) {
		ch, err := conn.Channel()
		if err != nil {
			return nil, err
		}
		if err := DeclareTopology(ch, exchange); err != nil {
			return nil, err
		}
		return newConfirmPublisher(ch, publisherConfig(url, exchange))
	}()
	if err != nil {
		conn.Close()
		return nil, err
	}
	return ownedPublisher{p, conn}, nil
}

// ownedPublisher closes its connection with it.
type ownedPublisher struct {
	*confirmPublisher
	conn *amqp.Connection
}

func (p ownedPublisher) Close() error { return p.conn.Close() }

// DeclareTopology declares the exchange and its unrouted queue as the feed
// does, so that a consumer can bind its queues before the feed first runs.
func DeclareTopology(ch *amqp.Channel, exchange string) error {
	unrouted := UnroutedQueue(exchange)
	if err := ch.ExchangeDeclare(unrouted, amqp.ExchangeFanout, true, false, false, false, nil); err != nil {
		return fmt.Errorf("declare exchange %s: %w", unrouted, err)
	}
	if _, err := ch.QueueDeclare(unrouted, true, false, false, false, nil); err != nil {
		return fmt.Errorf("declare queue %s: %w", unrouted, err)
	}
	if err := ch.QueueBind(unrouted, "", unrouted, false, nil); err != nil {
		return fmt.Errorf("bind queue %s: %w", unrouted, err)
	}
	c := publisherConfig("", exchange).Exchange
	if err := ch.ExchangeDeclare(exchange, c.Type, c.Durable, false, false, false, c.Arguments); err != nil {
		return fmt.Errorf("declare exchange %s: %w", exchange, err)
	}
	return nil
}

// connect dials, takes the lock, declares the topology and opens the
// publisher; on any failure it leaves the target disconnected.
func (t *AMQPTarget) connect() (err error) {
	if t.pub != nil {
		return nil
	}
	t.conn, err = wamqp.NewConnection(wamqp.ConnectionConfig{AmqpURI: t.url, AmqpConfig: &amqp.Config{
		Heartbeat:  10 * time.Second,
		Properties: amqp.Table{"connection_name": "tresor feed " + t.name},
	}}, watermill.NopLogger{})
	if err != nil {
		t.conn = nil
		return err
	}
	defer func() {
		if err != nil {
			t.reset()
		}
	}()
	if t.ctl, err = t.conn.Connection().Channel(); err != nil {
		return err
	}
	if _, err = t.ctl.QueueDeclare(t.lockQueue(), false, true, true, false, nil); err != nil {
		var ae *amqp.Error
		if errors.As(err, &ae) && ae.Code == amqp.ResourceLocked && !t.connected {
			return fmt.Errorf("queue %s is held by another connection: %w", t.lockQueue(), ErrFenced)
		}
		return err
	}
	if err = DeclareTopology(t.ctl, t.exchange); err != nil {
		return err
	}
	if _, err = t.ctl.QueueDeclare(t.checkpointQueue(), true, false, false, false, amqp.Table{"x-max-length": int32(1)}); err != nil {
		return fmt.Errorf("declare queue %s: %w", t.checkpointQueue(), err)
	}
	ch, err := t.conn.Connection().Channel()
	if err != nil {
		return err
	}
	if t.pub, err = newConfirmPublisher(ch, publisherConfig(t.url, t.exchange)); err != nil {
		return err
	}
	t.connected = true
	return nil
}

// reset closes the connection and everything on it: the next call
// reconnects.
func (t *AMQPTarget) reset() {
	if t.conn != nil {
		t.conn.Close()
	}
	t.conn, t.pub, t.ctl, t.checkpoint = nil, nil, nil, nil
}

// checkpointBody is the checkpoint message.
type checkpointBody struct {
	Feed     string    `json:"feed"`
	Exchange string    `json:"exchange"`
	Seq      uint64    `json:"seq"`
	At       time.Time `json:"at"`
}

// Checkpoint implements Target: it reads the checkpoint message and
// leaves it in its queue.
func (t *AMQPTarget) Checkpoint(ctx context.Context) (uint64, error) {
	if err := t.connect(); err != nil {
		return 0, err
	}
	if err := t.confirmCheckpoint(ctx); err != nil {
		t.reset()
		return 0, err
	}
	d, ok, err := t.ctl.Get(t.checkpointQueue(), false)
	if err != nil || !ok {
		if err != nil {
			t.reset()
		}
		return 0, err
	}
	var c checkpointBody
	err = json.Unmarshal(d.Body, &c)
	if nerr := d.Nack(false, true); err == nil && nerr != nil {
		t.reset()
		return 0, nerr
	}
	switch {
	case err != nil:
		return 0, fmt.Errorf("checkpoint in queue %s: %w", t.checkpointQueue(), err)
	case c.Exchange != t.exchange:
		return 0, fmt.Errorf("feed %s publishes to exchange %s, not %s: choose another --name: %w", t.name, c.Exchange, t.exchange, ErrFenced)
	}
	return c.Seq, nil
}

// Publish implements Target.
func (t *AMQPTarget) Publish(ctx context.Context, msgs []Message, to uint64) error {
	if err := t.connect(); err != nil {
		return err
	}
	// A broker that blocks publishers (a memory or disk alarm) would hold
	// a publish, which takes no context once its frames are queued:
	// closing the connection at the deadline ends it.
	conn := t.conn.Connection()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	err := t.publish(ctx, msgs, to)
	if err != nil {
		t.reset()
		if ctx.Err() != nil {
			return fmt.Errorf("publish to %s: %w (%w)", t.exchange, ctx.Err(), err)
		}
		return classifyAMQP(err)
	}
	return nil
}

// publish sends the messages, awaits their confirms and the previous
// checkpoint's (sent before them on the same channel), then sends the
// checkpoint to, whose confirm the next publish awaits.
func (t *AMQPTarget) publish(ctx context.Context, msgs []Message, to uint64) error {
	if len(msgs) > 0 {
		w := make([]*message.Message, len(msgs))
		for i, m := range msgs {
			w[i] = m.Watermill()
			w[i].SetContext(ctx)
		}
		if err := t.pub.Publish("tresor.feed", w...); err != nil {
			return fmt.Errorf("publish %d messages to %s: %w", len(msgs), t.exchange, err)
		}
	}
	if err := t.confirmCheckpoint(ctx); err != nil {
		return err
	}
	body, err := json.Marshal(checkpointBody{Feed: t.name, Exchange: t.exchange, Seq: to, At: time.Now().UTC()})
	if err != nil {
		return err
	}
	dc, err := t.pub.ch.PublishWithDeferredConfirmWithContext(ctx, "", t.checkpointQueue(), false, false,
		amqp.Publishing{DeliveryMode: amqp.Persistent, ContentType: "application/json", Body: body})
	if err != nil {
		return fmt.Errorf("publish checkpoint %d: %w", to, err)
	}
	t.checkpoint = dc
	return nil
}

// confirmCheckpoint awaits the confirm of the last checkpoint sent, if
// any.
func (t *AMQPTarget) confirmCheckpoint(ctx context.Context) error {
	if t.checkpoint == nil {
		return nil
	}
	if err := t.pub.await(ctx, []*amqp.DeferredConfirmation{t.checkpoint}, func(int) string { return "checkpoint" }); err != nil {
		return err
	}
	t.checkpoint = nil
	return nil
}

// classifyAMQP marks what a reachable broker refused for good as
// ErrRefused: a message nacked (a queue refusing it), a precondition
// failed, content too large, access refused.
// Everything else (connection closed, not connected) is retried.
func classifyAMQP(err error) error {
	if errors.Is(err, errNacked) {
		return fmt.Errorf("%w: %w", ErrRefused, err)
	}
	var ae *amqp.Error
	if errors.As(err, &ae) && ae.Server {
		switch ae.Code {
		case amqp.PreconditionFailed, amqp.ContentTooLarge, amqp.AccessRefused:
			return fmt.Errorf("%w: %w", ErrRefused, err)
		}
	}
	return err
}

// closeWait bounds the wait for the last checkpoint's confirm at Close.
const closeWait = 5 * time.Second

// Close implements Target: it awaits the last checkpoint's confirm (at
// most closeWait), so that a feed stopped cleanly resumes where it
// stopped, then closes the connection.
func (t *AMQPTarget) Close() error {
	var err error
	if t.pub != nil {
		ctx, cancel := context.WithTimeout(context.Background(), closeWait)
		err = t.confirmCheckpoint(ctx)
		cancel()
	}
	t.reset()
	return err
}
