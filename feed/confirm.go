package feed

import (
	"context"
	"errors"
	"fmt"

	wamqp "github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	"github.com/ThreeDotsLabs/watermill/message"
	amqp "github.com/rabbitmq/amqp091-go"
)

// confirmPublisher is a watermill message.Publisher on one AMQP channel in
// confirm mode that sends every message of a Publish call before it awaits
// any confirm, then awaits them all. It marshals, names the exchange and
// the routing key with watermill-amqp's Config, as watermill-amqp's own
// publisher does; what differs is the wait. watermill-amqp v3.0.2 (its
// latest release) offers transactions, or confirms awaited one message at
// a time (ConfirmDelivery: a round trip to the broker's disk per message);
// a transaction's commit and a confirm both answer once RabbitMQ holds the
// messages, persistent, in its durable queues, and RabbitMQ's own
// transactions are the slower of the two (docs/feed.md, "Where the
// checkpoint lives").
type confirmPublisher struct {
	cfg wamqp.Config
	ch  *amqp.Channel
}

// newConfirmPublisher puts ch in confirm mode and returns a publisher on
// it. ch carries nothing else but what Publish sends through it.
func newConfirmPublisher(ch *amqp.Channel, cfg wamqp.Config) (*confirmPublisher, error) {
	if err := ch.Confirm(false); err != nil {
		return nil, fmt.Errorf("confirm mode: %w", err)
	}
	return &confirmPublisher{cfg: cfg, ch: ch}, nil
}

// errNacked marks a message the broker refused (basic.nack): a queue
// rejected it (its overflow policy) or could not store it.
var errNacked = errors.New("not confirmed (basic.nack)")

// Publish implements message.Publisher: it returns once the broker has
// confirmed every message, in order on the channel, or the first error;
// an error wrapping errNacked names the first message refused. The
// context of the first message bounds the waits.
func (p *confirmPublisher) Publish(topic string, msgs ...*message.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	exchange, key := p.cfg.Exchange.GenerateName(topic), p.cfg.Publish.GenerateRoutingKey(topic)
	pending := make([]*amqp.DeferredConfirmation, len(msgs))
	for i, m := range msgs {
		pub, err := p.cfg.Marshaler.Marshal(m)
		if err != nil {
			return fmt.Errorf("marshal message %s: %w", m.UUID, err)
		}
		if pending[i], err = p.ch.PublishWithDeferredConfirmWithContext(m.Context(), exchange, key,
			p.cfg.Publish.Mandatory, p.cfg.Publish.Immediate, pub); err != nil {
			return fmt.Errorf("publish message %s: %w", m.UUID, err)
		}
	}
	return p.await(msgs[0].Context(), pending, func(i int) string { return "message " + msgs[i].UUID })
}

// Close implements message.Publisher. The channel belongs to the caller.
func (p *confirmPublisher) Close() error { return nil }

// await waits for every confirm of pending, and returns an error wrapping
// errNacked for the first one refused, named by name. A channel that
// closes resolves its pending confirms as refused too (amqp091): that is a
// lost connection, to retry, not a refusal.
func (p *confirmPublisher) await(ctx context.Context, pending []*amqp.DeferredConfirmation, name func(int) string) error {
	for i, dc := range pending {
		ok, err := dc.WaitContext(ctx)
		switch {
		case err != nil:
			return fmt.Errorf("%s: wait for its confirm: %w", name(i), err)
		case !ok && p.ch.IsClosed():
			return fmt.Errorf("%s: channel closed before its confirm: %w", name(i), amqp.ErrClosed)
		case !ok:
			return fmt.Errorf("%s: %w", name(i), errNacked)
		}
	}
	return nil
}
