// Package eventstore is the one place that knows how Tresor's events are
// written to and read from NATS JetStream, the only source of truth.
//
// It is generic: events carry a type string and a JSON payload, and the
// package never imports domain. What it guarantees (docs/events.md has the
// byte-level details):
//
//   - Durable: the embedded server syncs every write before acknowledging
//     it (sync_interval: always) unless told otherwise.
//   - Atomic: one append request is one JetStream atomic batch, all or
//     nothing, up to BatchEventsMax events, and readers see where it ends
//     (RecordedEvent.AppendRemaining), even when the Committer merged it
//     with others into one batch.
//   - Fenced: every batch is checked by the server against the last
//     sequence of its chain (the wildcard subject <prefix>.<chain>.>), so a
//     second writer can never fork a chain; caller expectations on the
//     chain or on aggregates come back as *ConflictError.
//   - Tamper-evident: each event's SHA-256 over a documented canonical
//     encoding links to its predecessor in its chain; decoding checks it,
//     and signed Seal events let a Verifier start from any seal.
//   - Fast: a Committer merges concurrent requests of one chain into
//     batches (one in flight by default, up to PipelineDepthMax), so
//     durable appends cost one commit per batch rather than one per event.
//   - Evidence of the tail: a committer starts only on a stream that holds
//     every position its high-water mark and the snapshots name, and voids
//     an append a damaged disk cut short (Void) rather than build on it.
//
// A single-threaded writer submits without waiting and collects answers
// later, in order:
//
//	res := committer.Submit(ctx, eventstore.AppendRequest{Events: evs})
//	... decide the next command ...; r := <-res // r.Sequences or r.Err
package eventstore
