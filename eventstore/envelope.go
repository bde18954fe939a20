package eventstore

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
)

// Limits on the names that end up in subjects and headers. They keep every
// subject token and header value plain ASCII, so the canonical encoding has
// no escaping rules and a regulator can re-implement it in any language.
const (
	// NameLenMax bounds chain names, aggregate kinds and aggregate ids.
	NameLenMax = 64
	// TypeLenMax bounds event type strings.
	TypeLenMax = 128
	// IDLenMax bounds event, correlation and causation ids.
	IDLenMax = 128
	// PayloadLenMax bounds one event's JSON payload (the server's default
	// max_payload is 1 MiB and headers take some of it).
	PayloadLenMax = 512 * 1024
)

// Header names of the envelope. They are part of the stored format: never
// rename one without a migration (docs/events.md lists them).
const (
	HeaderID          = "Tresor-Id"
	HeaderType        = "Tresor-Type"
	HeaderSchema      = "Tresor-Schema"
	HeaderChainSeq    = "Tresor-Chain-Seq"
	HeaderRecordedAt  = "Tresor-Recorded-At"
	HeaderCorrelation = "Tresor-Correlation"
	HeaderCausation   = "Tresor-Causation"
	HeaderPrevHash    = "Tresor-Prev-Hash"
	HeaderHash        = "Tresor-Hash"
	// HeaderAppendRemaining is on every event of an atomic append but its
	// last: how many events of the same append follow it in the stream
	// (decimal, 1 to BatchEventsMax-1). Its absence means the event ends
	// its append, so single-event appends, seals and every event stored
	// before it existed carry nothing. It is not hashed: it says how events
	// were grouped at commit, as the stream sequence says where they
	// landed (docs/events.md).
	HeaderAppendRemaining = "Tresor-Append-Remaining"
)

// canonicalTag opens every canonical encoding so that a hash of an event can
// never be confused with a hash of anything else (a seal, a Merkle node).
const canonicalTag = "tresor-event-v1"

// Hash is a SHA-256 digest. The zero Hash is the "previous hash" of the
// first event of a chain.
type Hash [sha256.Size]byte

// String is lowercase hex, the form stored in headers.
func (h Hash) String() string { return hex.EncodeToString(h[:]) }

// IsZero reports whether h is the all-zero hash.
func (h Hash) IsZero() bool { return h == Hash{} }

// ParseHash reads the 64-hex-digit form written by String.
func ParseHash(s string) (Hash, error) {
	var h Hash
	if len(s) != 2*len(h) {
		return h, fmt.Errorf("parse hash %q: want %d hex digits", s, 2*len(h))
	}
	// Decoded from a copy on the stack: a reader of a whole export parses
	// two hashes a line, and a conversion of s would allocate each time.
	var digits [2 * len(h)]byte
	copy(digits[:], s)
	if _, err := hex.Decode(h[:], digits[:]); err != nil {
		return h, fmt.Errorf("parse hash %q: %w", s, err)
	}
	return h, nil
}

// Aggregate names the consistency boundary an event belongs to (a player
// account, a block). Kind and ID become subject tokens.
type Aggregate struct {
	Kind string
	ID   string
}

// String is "kind.id", the tail of the aggregate's subject.
func (a Aggregate) String() string { return a.Kind + "." + a.ID }

// Event is what a writer asks to append: a fact with its type and payload.
// The store adds the chain position, time and hashes.
type Event struct {
	// ID is unique per event; the store generates one when empty. A retry of
	// the same logical event should reuse its ID.
	ID string
	// Type is the stable event type string (never renamed).
	Type string
	// SchemaVersion is the payload's schema version for Type, from 1.
	SchemaVersion uint32
	// Aggregate is the consistency boundary the event belongs to.
	Aggregate Aggregate
	// CorrelationID ties together the events of one user action; optional.
	CorrelationID string
	// CausationID is the id of the command or event that caused this one;
	// optional.
	CausationID string
	// At is when the writer decided the event; the store records it as
	// RecordedAt. Zero means the store's clock when the batch is built. A
	// writer whose state depends on event times (rolling limits, key
	// expiry) sets it, so that replaying the stream rebuilds exactly the
	// state it decided on. It is not stored apart from RecordedAt.
	At time.Time
	// Payload is the event's JSON body, stored byte for byte.
	Payload json.RawMessage
}

// RecordedEvent is an event as stored: the Event plus its place in its
// chain and in the stream, its time and its hashes.
type RecordedEvent struct {
	Event
	// Chain is the hash chain (writer shard) the event belongs to.
	Chain string
	// ChainSeq is the 1-based position of the event in its chain.
	ChainSeq uint64
	// RecordedAt is when the writer built the event (UTC, nanoseconds).
	RecordedAt time.Time
	// PrevHash is the Hash of the previous event of the chain, zero for the
	// first.
	PrevHash Hash
	// Hash is SHA-256 over the canonical encoding (docs/events.md).
	Hash Hash
	// Sequence is the JetStream stream sequence. It is not hashed: the
	// server assigns it, and other chains interleave in the same stream.
	Sequence uint64
	// AppendRemaining is how many events of the same atomic append (one
	// AppendRequest, one command) follow this one, at the next stream
	// sequences: 0 for the last or only event of its append. Readers that
	// must never show part of an append (projections) apply it whole. It
	// is not hashed (header HeaderAppendRemaining); events stored before
	// it existed read as 0, each its own append.
	AppendRemaining int
	// Voided marks an event of an append cut short, which a Void event
	// after it names (see Void): it stays in the hash chain, but it is
	// not the ledger's, and no reader applies it. Readers set it; it is
	// neither stored nor hashed.
	Voided bool
}

// appendField appends one length-prefixed field: 4-byte big-endian length,
// then the bytes.
func appendField(b []byte, f []byte) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(len(f)))
	return append(b, f...)
}

func appendStringField(b []byte, s string) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(len(s)))
	return append(b, s...)
}

// appendUintField appends an integer as an 8-byte big-endian field.
func appendUintField(b []byte, v uint64) []byte {
	b = binary.BigEndian.AppendUint32(b, 8)
	return binary.BigEndian.AppendUint64(b, v)
}

// AppendCanonical appends the canonical encoding of ev (everything but
// Hash and Sequence) to b. It is exported so that tools (and tests) can show
// the exact bytes that are hashed; docs/events.md describes them.
func AppendCanonical(b []byte, ev *RecordedEvent) []byte {
	b = appendStringField(b, canonicalTag)
	b = appendStringField(b, ev.ID)
	b = appendStringField(b, ev.Type)
	b = appendUintField(b, uint64(ev.SchemaVersion))
	b = appendStringField(b, ev.Chain)
	b = appendUintField(b, ev.ChainSeq)
	b = appendStringField(b, ev.Aggregate.Kind)
	b = appendStringField(b, ev.Aggregate.ID)
	b = appendUintField(b, uint64(ev.RecordedAt.UnixNano()))
	b = appendStringField(b, ev.CorrelationID)
	b = appendStringField(b, ev.CausationID)
	b = appendField(b, ev.PrevHash[:])
	return appendField(b, ev.Payload)
}

// ComputeHash returns SHA-256 of the canonical encoding of ev. The buffer
// on the stack holds the largest common event, a UnitAssigned with its
// proof (about 1.7 KB), so that hashing a stream allocates nothing.
func ComputeHash(ev *RecordedEvent) Hash {
	var buf [2048]byte
	return sha256.Sum256(AppendCanonical(buf[:0], ev))
}

// validName accepts subject-token-safe names: ASCII letters, digits, '_'
// and '-', 1..max bytes. Names starting with '_' are reserved for the store.
func validName(s string, maxLen int, allowDot bool) bool {
	if s == "" || len(s) > maxLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '_', c == '-':
		case c == '.' && allowDot:
		default:
			return false
		}
	}
	return true
}

// validID accepts printable ASCII without spaces, 0..IDLenMax bytes.
func validID(s string) bool {
	if len(s) > IDLenMax {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// ValidateChain checks a chain name: it becomes a subject token.
func ValidateChain(chain string) error {
	if !validName(chain, NameLenMax, false) {
		return fmt.Errorf("chain %q: want 1..%d of [A-Za-z0-9_-]: %w", chain, NameLenMax, ErrInvalid)
	}
	return nil
}

// validateEvent checks what the writer supplied but the payload's JSON
// (validateRequest checks it unless the caller marshaled it); reserved
// says whether the store's own "_" kinds are allowed (seals).
func validateEvent(ev *Event, reserved bool) error {
	switch {
	case !validName(ev.Type, TypeLenMax, true):
		return fmt.Errorf("event type %q: want 1..%d of [A-Za-z0-9_.-]: %w", ev.Type, TypeLenMax, ErrInvalid)
	case ev.SchemaVersion == 0:
		return fmt.Errorf("event type %q: schema version must be >= 1: %w", ev.Type, ErrInvalid)
	case !validName(ev.Aggregate.Kind, NameLenMax, false) || (!reserved && strings.HasPrefix(ev.Aggregate.Kind, "_")):
		return fmt.Errorf("event type %q: aggregate kind %q: want 1..%d of [A-Za-z0-9_-] not starting with '_': %w",
			ev.Type, ev.Aggregate.Kind, NameLenMax, ErrInvalid)
	case !validName(ev.Aggregate.ID, NameLenMax, false):
		return fmt.Errorf("event type %q: aggregate id %q: want 1..%d of [A-Za-z0-9_-]: %w",
			ev.Type, ev.Aggregate.ID, NameLenMax, ErrInvalid)
	case !validID(ev.ID) || !validID(ev.CorrelationID) || !validID(ev.CausationID):
		return fmt.Errorf("event type %q: ids must be printable ASCII without spaces, at most %d bytes: %w",
			ev.Type, IDLenMax, ErrInvalid)
	case len(ev.Payload) > PayloadLenMax:
		return fmt.Errorf("event type %q: payload of %d bytes exceeds %d: %w", ev.Type, len(ev.Payload), PayloadLenMax, ErrInvalid)
	}
	return nil
}

// subjects knows the subject layout <prefix>.<chain>.<kind>.<id>.
type subjects struct{ prefix string }

func (s subjects) event(chain string, agg Aggregate) string {
	return s.prefix + "." + chain + "." + agg.Kind + "." + agg.ID
}

// chain is the wildcard covering every event of one chain: the fence subject.
func (s subjects) chain(chain string) string { return s.prefix + "." + chain + ".>" }

// all covers the whole stream.
func (s subjects) all() string { return s.prefix + ".>" }

// split splits an event subject into chain and aggregate.
func (s subjects) split(subject string) (string, Aggregate, bool) {
	rest, ok := strings.CutPrefix(subject, s.prefix+".")
	if !ok {
		return "", Aggregate{}, false
	}
	parts := strings.Split(rest, ".")
	if len(parts) != 3 {
		return "", Aggregate{}, false
	}
	return parts[0], Aggregate{Kind: parts[1], ID: parts[2]}, true
}

// encodeMsg builds the NATS message of a recorded event: the subject names
// chain and aggregate, headers carry the envelope, the body is the payload
// exactly as hashed. The committer encodes every event it appends, so the
// message is built with few allocations: the header's value slices share
// one array, the map has room for the batch's headers that publishBatch
// adds, and the subject and the values computed here (schema, chain
// position, time, hashes, marker) are cut from one string.
func (s subjects) encodeMsg(ev *RecordedEvent) *nats.Msg {
	m := new(nats.Msg)
	s.encodeMsgInto(m, make([]string, 0, envelopeHeaders), ev)
	return m
}

// encodeMsgInto is encodeMsg into m, whatever it held: its header map, if
// it has one, is cleared and reused (a committer reuses the messages of an
// acknowledged batch), and the header values are appended to vals, which
// it returns (a batch's values share one array).
func (s subjects) encodeMsgInto(m *nats.Msg, vals []string, ev *RecordedEvent) []string {
	var buf [encodedMsgBytes]byte
	b := append(append(append(buf[:0], s.prefix...), '.'), ev.Chain...)
	b = append(append(append(append(b, '.'), ev.Aggregate.Kind...), '.'), ev.Aggregate.ID...)
	subjectEnd := len(b)
	b = strconv.AppendUint(b, uint64(ev.SchemaVersion), 10)
	schemaEnd := len(b)
	b = strconv.AppendUint(b, ev.ChainSeq, 10)
	seqEnd := len(b)
	b = ev.RecordedAt.UTC().AppendFormat(b, time.RFC3339Nano)
	atEnd := len(b)
	b = hex.AppendEncode(b, ev.PrevHash[:])
	prevEnd := len(b)
	b = hex.AppendEncode(b, ev.Hash[:])
	hashEnd := len(b)
	if ev.AppendRemaining > 0 {
		b = strconv.AppendInt(b, int64(ev.AppendRemaining), 10)
	}
	v := string(b)
	h := m.Header
	if h == nil {
		h = make(nats.Header, msgHeaderSlots)
	} else {
		clear(h)
	}
	set := func(key, value string) {
		vals = append(vals, value)
		h[key] = vals[len(vals)-1 : len(vals) : len(vals)]
	}
	set(HeaderID, ev.ID)
	set(HeaderType, ev.Type)
	set(HeaderSchema, v[subjectEnd:schemaEnd])
	set(HeaderChainSeq, v[schemaEnd:seqEnd])
	set(HeaderRecordedAt, v[seqEnd:atEnd])
	set(HeaderPrevHash, v[atEnd:prevEnd])
	set(HeaderHash, v[prevEnd:hashEnd])
	if ev.CorrelationID != "" {
		set(HeaderCorrelation, ev.CorrelationID)
	}
	if ev.CausationID != "" {
		set(HeaderCausation, ev.CausationID)
	}
	if ev.AppendRemaining > 0 {
		set(HeaderAppendRemaining, v[hashEnd:])
	}
	*m = nats.Msg{Subject: v[:subjectEnd], Header: h, Data: ev.Payload}
	return vals
}

// encodedMsgBytes holds, on the stack, what encodeMsgInto computes for an
// event whose names are of common length: its subject and header values.
const encodedMsgBytes = 512

// envelopeHeaders is the most headers of the envelope on one event.
// msgHeaderSlots sizes the header map for them and the batch's id and
// position, which every message gets; the fence of a batch's first message
// and the commit of its last may grow it. A map sized for every header at
// once is slower: every message pays for its larger allocation, where only
// the first and last of a batch grow theirs (BenchmarkEncodeMsg measures
// it).
const (
	envelopeHeaders = 10
	msgHeaderSlots  = envelopeHeaders + 2
)

// decode rebuilds a RecordedEvent from a stored message and checks its hash.
// Any malformed or altered field is an *IntegrityError naming the sequence.
func (s subjects) decode(subject string, seq uint64, hdr nats.Header, data []byte) (RecordedEvent, error) {
	ev, err := s.parse(subject, seq, hdr, data)
	if err != nil {
		return RecordedEvent{}, err
	}
	if got := ComputeHash(&ev); got != ev.Hash {
		return RecordedEvent{}, &IntegrityError{Sequence: seq, Subject: subject, What: "hash", Expected: ev.Hash.String(), Found: got.String()}
	}
	return ev, nil
}

// CheckHash checks the hash of an event read as stored (ReadStored,
// FollowStored) as a checked read does: it returns an *IntegrityError
// naming the sequence, the chain and aggregate, and both hashes, or nil.
func CheckHash(ev *RecordedEvent) error { return hashMismatch(ev, ComputeHash(ev)) }

// parse rebuilds a RecordedEvent from a stored message as stored, its Hash
// the one of its Tresor-Hash header, without checking it. A malformed field
// is an *IntegrityError naming the sequence.
func (s subjects) parse(subject string, seq uint64, hdr nats.Header, data []byte) (RecordedEvent, error) {
	bad := func(what, want, found string) (RecordedEvent, error) {
		return RecordedEvent{}, &IntegrityError{Sequence: seq, Subject: subject, What: what, Expected: want, Found: found}
	}
	chain, agg, ok := s.split(subject)
	if !ok {
		return bad("subject", s.prefix+".<chain>.<kind>.<id>", subject)
	}
	ev := RecordedEvent{Chain: chain, Sequence: seq}
	ev.Aggregate = agg
	ev.ID = hdr.Get(HeaderID)
	ev.Type = hdr.Get(HeaderType)
	ev.CorrelationID = hdr.Get(HeaderCorrelation)
	ev.CausationID = hdr.Get(HeaderCausation)
	ev.Payload = json.RawMessage(data)
	schema, err := strconv.ParseUint(hdr.Get(HeaderSchema), 10, 32)
	if err != nil {
		return bad("header "+HeaderSchema, "decimal uint32", hdr.Get(HeaderSchema))
	}
	ev.SchemaVersion = uint32(schema)
	if ev.ChainSeq, err = strconv.ParseUint(hdr.Get(HeaderChainSeq), 10, 64); err != nil || ev.ChainSeq == 0 {
		return bad("header "+HeaderChainSeq, "decimal >= 1", hdr.Get(HeaderChainSeq))
	}
	if ev.RecordedAt, err = time.Parse(time.RFC3339Nano, hdr.Get(HeaderRecordedAt)); err != nil {
		return bad("header "+HeaderRecordedAt, "RFC 3339 time", hdr.Get(HeaderRecordedAt))
	}
	ev.RecordedAt = ev.RecordedAt.UTC()
	if ev.PrevHash, err = ParseHash(hdr.Get(HeaderPrevHash)); err != nil {
		return bad("header "+HeaderPrevHash, "64 hex digits", hdr.Get(HeaderPrevHash))
	}
	if ev.Hash, err = ParseHash(hdr.Get(HeaderHash)); err != nil {
		return bad("header "+HeaderHash, "64 hex digits", hdr.Get(HeaderHash))
	}
	if _, ok := hdr[HeaderAppendRemaining]; ok {
		v := hdr.Get(HeaderAppendRemaining)
		if ev.AppendRemaining, err = parseAppendRemaining(v); err != nil {
			return bad("header "+HeaderAppendRemaining, err.Error(), v)
		}
	}
	return ev, nil
}

// parseAppendRemaining reads a present append marker: an append holds at
// most BatchEventsMax events, so at most BatchEventsMax-1 follow one, and
// a marker saying none follow would be absent.
func parseAppendRemaining(v string) (int, error) {
	n, err := strconv.ParseUint(v, 10, 16)
	if err != nil || n == 0 || n >= BatchEventsMax {
		return 0, fmt.Errorf("decimal 1..%d", BatchEventsMax-1)
	}
	return int(n), nil
}
