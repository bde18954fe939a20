package eventstore

import (
	"errors"
	"fmt"
)

// Sentinel errors let callers branch with errors.Is without depending on the
// typed error that carries the details.
var (
	// ErrConflict reports that an optimistic-concurrency expectation did not
	// hold: nothing of the request was written. The caller reloads and decides
	// again. The details are in a *ConflictError.
	ErrConflict = errors.New("eventstore: conflict")

	// ErrIntegrity reports a stored event whose bytes do not match its hash or
	// its chain: the log was altered outside Tresor. The details are in a
	// *IntegrityError.
	ErrIntegrity = errors.New("eventstore: integrity violation")

	// ErrOutcomeUnknown reports an append whose acknowledgement was lost (a
	// timeout, a dropped connection, or JetStream error 10201 on a replayed
	// batch) and whose events could not be found on the stream afterwards: the
	// batch may still have been committed. The caller must rebuild its state
	// from the stream, which is the truth, before deciding again.
	ErrOutcomeUnknown = errors.New("eventstore: append outcome unknown, possibly committed")

	// ErrFenced reports that another writer appended to a chain the committer
	// believed it owned. The committer stops; its owner must rebuild from the
	// stream (and usually step down).
	ErrFenced = errors.New("eventstore: chain fenced by another writer")

	// ErrClosed reports a use of a closed committer or store.
	ErrClosed = errors.New("eventstore: closed")

	// ErrInvalid reports a request that can never succeed as written: bad
	// names, too many events, payload that is not JSON.
	ErrInvalid = errors.New("eventstore: invalid request")

	// ErrUnknownType reports an event type the Registry does not know.
	ErrUnknownType = errors.New("eventstore: unknown event type")

	// ErrSchemaTooNew reports an event written with a schema version newer
	// than this binary knows: reading it would lose information.
	ErrSchemaTooNew = errors.New("eventstore: event schema version newer than known")

	// ErrServerTooOld reports a nats-server without atomic batch publish
	// (below 2.12).
	ErrServerTooOld = errors.New("eventstore: nats-server too old")

	// ErrUnsafeStream reports an existing stream whose configuration could
	// lose or rewrite events. The details are in an *UnsafeStreamError.
	ErrUnsafeStream = errors.New("eventstore: unsafe stream configuration")

	// ErrDisconnected reports a follower whose connection to NATS closed
	// or stayed down for a whole Config.RequestTimeout: the caller decides
	// whether to reconnect and resume from its last sequence.
	ErrDisconnected = errors.New("eventstore: connection to NATS lost")

	// ErrReadOnly reports a write through a store opened with
	// Config.ReadOnly.
	ErrReadOnly = errors.New("eventstore: read-only store")

	// ErrNoSpace reports a JetStream server that refused to store for lack
	// of disk space: creating a stream whose limits it cannot reserve, or a
	// write to a full disk. Waiting does not help; freeing space does.
	ErrNoSpace = errors.New("eventstore: not enough disk space")

	// ErrGap reports a hole in stream sequences while reading: since the
	// stream denies deletes and purges, a gap means lost data or a bug.
	ErrGap = errors.New("eventstore: gap in stream sequence")
)

// ConflictError says which expectation failed, so a caller can log it and a
// test can assert on it. It matches ErrConflict.
type ConflictError struct {
	// Chain is the chain the append targeted.
	Chain string
	// Subject is the aggregate subject, or the chain wildcard for a chain
	// expectation.
	Subject string
	// Expected is the last sequence the caller stated.
	Expected uint64
	// Actual is the last sequence found, when known (0 when the server only
	// said "wrong last sequence").
	Actual uint64
}

// Error describes the failed expectation.
func (e *ConflictError) Error() string {
	return fmt.Sprintf("eventstore: conflict on %s in chain %s: expected last sequence %d, found %d",
		e.Subject, e.Chain, e.Expected, e.Actual)
}

// Is makes errors.Is(err, ErrConflict) true.
func (e *ConflictError) Is(target error) bool { return target == ErrConflict }

// IntegrityError says where the log was found altered and what was expected
// versus found, so that an auditor can point at the exact message. It
// matches ErrIntegrity.
type IntegrityError struct {
	// Sequence is the stream sequence of the offending message.
	Sequence uint64
	// Subject is the subject the message was stored under.
	Subject string
	// What names the broken property: "hash", "prev_hash", "chain_seq",
	// "seal", "header" ...
	What string
	// Expected and Found are the values compared (hex for hashes).
	Expected, Found string
}

// Error describes the violation with both values.
func (e *IntegrityError) Error() string {
	return fmt.Sprintf("eventstore: integrity violation at sequence %d (%s): %s expected %q, found %q",
		e.Sequence, e.Subject, e.What, e.Expected, e.Found)
}

// Is makes errors.Is(err, ErrIntegrity) true.
func (e *IntegrityError) Is(target error) bool { return target == ErrIntegrity }

// SchemaError names the event type and versions involved in a registry
// failure. It matches ErrUnknownType or ErrSchemaTooNew.
type SchemaError struct {
	// Type is the event type found.
	Type string
	// Version is the schema version found on the event.
	Version uint32
	// Current is the version the registry knows (0 if the type is unknown).
	Current uint32
	// Sequence is the stream sequence, 0 on the write path.
	Sequence uint64
	kind     error
}

// Error names the type and versions.
func (e *SchemaError) Error() string {
	if e.kind == ErrUnknownType {
		return fmt.Sprintf("eventstore: unknown event type %q (schema %d) at sequence %d", e.Type, e.Version, e.Sequence)
	}
	return fmt.Sprintf("eventstore: event type %q schema %d at sequence %d, this binary knows up to %d",
		e.Type, e.Version, e.Sequence, e.Current)
}

// Unwrap exposes the sentinel.
func (e *SchemaError) Unwrap() error { return e.kind }

// UnsafeStreamError lists every setting of an existing stream that differs
// from what Tresor requires. The stream is never changed silently: an
// operator fixes it (or the configuration) knowingly. It matches
// ErrUnsafeStream.
type UnsafeStreamError struct {
	// Stream is the stream name.
	Stream string
	// Diffs are human-readable "setting: want X, have Y" lines.
	Diffs []string
}

// Error lists the differences.
func (e *UnsafeStreamError) Error() string {
	return fmt.Sprintf("eventstore: stream %s has an unsafe configuration: %v", e.Stream, e.Diffs)
}

// Is makes errors.Is(err, ErrUnsafeStream) true.
func (e *UnsafeStreamError) Is(target error) bool { return target == ErrUnsafeStream }
