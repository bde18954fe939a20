// Package feed is Tresor's finance feed: it follows the event stream from
// a durable checkpoint and publishes, through watermill publishers, one
// message per event that moves money (its double-entry postings) and one
// per settled play, to RabbitMQ (AMQP) or to an outbox table in
// PostgreSQL. Messages keep stream order; their UUIDs are derived from the
// event ids, so a consumer deduplicates on them; the checkpoint lives with
// the target and moves only once the target has confirmed what it covers.
// docs/feed.md is the contract.
package feed
