package eventstore

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// ExportLineMax bounds one line of an export: the largest payload, base64
// encoded, plus the envelope. A longer line is malformed, so a reader never
// buffers without limit.
const ExportLineMax = 1 << 20

// ExportWriter writes recorded events as NDJSON, one per line.
//
// Each line is one JSON object with these members, always in this order
// (docs/export.md is the contract for regulators):
//
//	sequence, subject, id, type, schema_version, chain, chain_seq,
//	aggregate_kind, aggregate_id, recorded_at, correlation_id,
//	causation_id, prev_hash, hash, append_remaining (only when not 0),
//	and last payload (or payload_base64).
//
// The payload is written verbatim, never re-encoded, as the last member, so
// that the hashed bytes are the line's bytes between `"payload":` and the
// final `}`. A payload that cannot round-trip that way (see verbatim; only a
// message forged outside Tresor can hold one) goes base64-encoded in
// payload_base64 instead.
type ExportWriter struct {
	w      *bufio.Writer
	prefix string
	line   []byte
}

// NewExportWriter buffers lines to w; call Flush at the end. Subjects use
// the default prefix "tresor" unless SetSubjectPrefix says otherwise.
func NewExportWriter(w io.Writer) *ExportWriter {
	return &ExportWriter{w: bufio.NewWriterSize(w, 256<<10), prefix: defaultSubjectPrefix, line: make([]byte, 0, 4096)}
}

// SetSubjectPrefix sets the first subject token written in each line's
// subject: a record does not carry it, the store's Config does.
func (x *ExportWriter) SetSubjectPrefix(prefix string) { x.prefix = prefix }

// Write writes r as one line. It returns ErrInvalid when a string field is
// not valid UTF-8 (JSON cannot carry it byte for byte) or when the line
// would exceed ExportLineMax (readers refuse it) — only a message forged
// outside Tresor can be either — or the write error.
func (x *ExportWriter) Write(r RecordedEvent) error {
	b, err := x.appendLine(x.line[:0], r)
	x.line = b
	if err != nil {
		return err
	}
	if _, err := x.w.Write(b); err != nil {
		return fmt.Errorf("export sequence %d: %w", r.Sequence, err)
	}
	return nil
}

// appendLine appends r's line to b, with its line break; its errors are
// Write's but the write's.
func (x *ExportWriter) appendLine(b []byte, r RecordedEvent) ([]byte, error) {
	start := len(b)
	b = append(b, `{"sequence":`...)
	b = strconv.AppendUint(b, r.Sequence, 10)
	var err error
	key := func(k string) { b = append(append(append(b, ',', '"'), k...), '"', ':') }
	str := func(k, v string) {
		key(k)
		if err == nil {
			b, err = appendJSONString(b, v)
		}
	}
	num := func(k string, v uint64) { key(k); b = strconv.AppendUint(b, v, 10) }
	// Hex digits and RFC 3339 times need no escaping.
	hash := func(k string, h Hash) { key(k); b = append(hex.AppendEncode(append(b, '"'), h[:]), '"') }
	str("subject", x.prefix+"."+r.Chain+"."+r.Aggregate.String())
	str("id", r.ID)
	str("type", r.Type)
	num("schema_version", uint64(r.SchemaVersion))
	str("chain", r.Chain)
	num("chain_seq", r.ChainSeq)
	str("aggregate_kind", r.Aggregate.Kind)
	str("aggregate_id", r.Aggregate.ID)
	key("recorded_at")
	b = append(r.RecordedAt.UTC().AppendFormat(append(b, '"'), time.RFC3339Nano), '"')
	str("correlation_id", r.CorrelationID)
	str("causation_id", r.CausationID)
	hash("prev_hash", r.PrevHash)
	hash("hash", r.Hash)
	if r.AppendRemaining != 0 {
		// Only events followed by more of their append carry it: an export
		// of single-event appends reads as one written before it existed.
		num("append_remaining", uint64(r.AppendRemaining))
	}
	if err != nil {
		return b, fmt.Errorf("export sequence %d: %w", r.Sequence, err)
	}
	if verbatim(r.Payload) {
		b = append(append(b, `,"payload":`...), r.Payload...)
	} else {
		b = append(b, `,"payload_base64":"`...)
		b = base64.StdEncoding.AppendEncode(b, r.Payload)
		b = append(b, '"')
	}
	b = append(b, '}', '\n')
	if n := len(b) - start; n > ExportLineMax+1 {
		return b, fmt.Errorf("export sequence %d: a line of %d bytes exceeds %d: %w", r.Sequence, n-1, ExportLineMax, ErrInvalid)
	}
	return b, nil
}

// Flush writes any buffered lines to the underlying writer.
func (x *ExportWriter) Flush() error { return x.w.Flush() }

// exportLine is the JSON shape of one line, for reading.
type exportLine struct {
	Sequence      uint64 `json:"sequence"`
	Subject       string `json:"subject"`
	ID            string `json:"id"`
	Type          string `json:"type"`
	SchemaVersion uint32 `json:"schema_version"`
	Chain         string `json:"chain"`
	ChainSeq      uint64 `json:"chain_seq"`
	AggregateKind string `json:"aggregate_kind"`
	AggregateID   string `json:"aggregate_id"`
	RecordedAt    string `json:"recorded_at"`
	CorrelationID string `json:"correlation_id"`
	CausationID   string `json:"causation_id"`
	PrevHash      string `json:"prev_hash"`
	Hash          string `json:"hash"`
	// AppendRemaining is absent (0) on the last event of an append and in
	// exports written before it existed.
	AppendRemaining uint64          `json:"append_remaining"`
	Payload         json.RawMessage `json:"payload"`
	PayloadBase64   *string         `json:"payload_base64"`
}

// ReadExport parses an NDJSON export and calls fn for each record in file order.
// It only parses: it does NOT verify hashes (auditors report a bad hash as a
// violation, with its sequence), but a malformed line is an error naming the
// line number. fn's error stops the read and is returned as is.
func ReadExport(r io.Reader, fn func(RecordedEvent) error) error {
	br := bufio.NewReaderSize(r, 256<<10)
	for n := 1; ; n++ {
		line, err := readLine(br)
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read export line %d: %w", n, err)
		}
		ev, err := parseExportLine(line)
		if err != nil {
			return fmt.Errorf("export line %d: %w", n, err)
		}
		if err := fn(ev); err != nil {
			return err
		}
	}
}

// readLine returns the next line without its '\n', io.EOF at the end. A
// last line without '\n' is returned as is: parsing tells a truncated one.
func readLine(br *bufio.Reader) ([]byte, error) {
	line, err := br.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) {
		full := append([]byte(nil), line...)
		for errors.Is(err, bufio.ErrBufferFull) && len(full) <= ExportLineMax {
			line, err = br.ReadSlice('\n')
			full = append(full, line...)
		}
		line = full
	}
	if len(line) > ExportLineMax+1 {
		return nil, fmt.Errorf("line longer than %d bytes: %w", ExportLineMax, ErrInvalid)
	}
	if err == io.EOF && len(line) > 0 {
		err = nil
	}
	if err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(line, []byte{'\n'}), nil
}

// parseExportLine decodes one line into a RecordedEvent, checking that every
// field has its documented form (but not the hash).
func parseExportLine(line []byte) (RecordedEvent, error) {
	l, ok := scanWrittenLine(line)
	if !ok {
		l = exportLine{}
		if err := json.Unmarshal(line, &l); err != nil {
			return RecordedEvent{}, fmt.Errorf("not a JSON object: %v: %w", err, ErrInvalid)
		}
	}
	return l.event()
}

// event is the RecordedEvent of a line read, once every field is checked
// to have its documented form (but not the hash).
func (l *exportLine) event() (RecordedEvent, error) {
	bad := func(field, want, found string) (RecordedEvent, error) {
		return RecordedEvent{}, fmt.Errorf("%s: want %s, found %q: %w", field, want, found, ErrInvalid)
	}
	ev := RecordedEvent{Sequence: l.Sequence, Chain: l.Chain, ChainSeq: l.ChainSeq}
	ev.ID, ev.Type, ev.SchemaVersion = l.ID, l.Type, l.SchemaVersion
	ev.Aggregate = Aggregate{Kind: l.AggregateKind, ID: l.AggregateID}
	ev.CorrelationID, ev.CausationID = l.CorrelationID, l.CausationID
	var err error
	switch {
	case l.Sequence == 0:
		return bad("sequence", "an integer >= 1", "0")
	case l.ChainSeq == 0:
		return bad("chain_seq", "an integer >= 1", "0")
	case !hasSubjectTail(l.Subject, l.Chain, ev.Aggregate):
		return bad("subject", "<prefix>."+l.Chain+"."+ev.Aggregate.String(), l.Subject)
	}
	if ev.RecordedAt, err = time.Parse(time.RFC3339Nano, l.RecordedAt); err != nil {
		return bad("recorded_at", "an RFC 3339 time", l.RecordedAt)
	}
	ev.RecordedAt = ev.RecordedAt.UTC()
	if ev.PrevHash, err = ParseHash(l.PrevHash); err != nil {
		return bad("prev_hash", "64 hex digits", l.PrevHash)
	}
	if ev.Hash, err = ParseHash(l.Hash); err != nil {
		return bad("hash", "64 hex digits", l.Hash)
	}
	if l.AppendRemaining != 0 {
		v := strconv.FormatUint(l.AppendRemaining, 10)
		if ev.AppendRemaining, err = parseAppendRemaining(v); err != nil {
			return bad("append_remaining", "absent or "+err.Error(), v)
		}
	}
	switch {
	case l.PayloadBase64 != nil && l.Payload != nil:
		return bad("payload", "payload or payload_base64, not both", "both")
	case l.PayloadBase64 != nil:
		p, err := base64.StdEncoding.DecodeString(*l.PayloadBase64)
		if err != nil {
			return bad("payload_base64", "standard base64", *l.PayloadBase64)
		}
		ev.Payload = p
	case l.Payload != nil:
		ev.Payload = l.Payload
	default:
		return bad("payload", "a JSON value", "nothing")
	}
	return ev, nil
}

// hasSubjectTail reports whether subject ends with
// ".<chain>.<kind>.<id>", as strings.HasSuffix would with the tail built,
// without building it: every line of an export is checked.
func hasSubjectTail(subject, chain string, agg Aggregate) bool {
	for _, token := range [...]string{agg.ID, agg.Kind, chain} {
		rest, ok := strings.CutSuffix(subject, token)
		if !ok || !strings.HasSuffix(rest, ".") {
			return false
		}
		subject = rest[:len(rest)-1]
	}
	return true
}

// scanWrittenLine reads a line laid out exactly as ExportWriter writes it
// (the members in order, no spaces, strings of printable ASCII without
// escapes, a verbatim payload): the common case, several times faster than
// encoding/json, which an audit of a whole file notices. Any other line
// gives false and goes through encoding/json, which reads every valid
// layout and names what is wrong with an invalid one.
func scanWrittenLine(line []byte) (exportLine, bool) {
	return lineScanner{b: line, ok: true}.scan(true)
}

// scan reads the line of s laid out as ExportWriter writes it
// (scanWrittenLine); checkJSON says whether the payload must also be
// valid JSON to be taken verbatim.
func (s lineScanner) scan(checkJSON bool) (exportLine, bool) {
	var l exportLine
	s.lit(`{"sequence":`)
	l.Sequence = s.uint(64)
	l.Subject = s.str(`,"subject":`)
	l.ID = s.str(`,"id":`)
	l.Type = s.str(`,"type":`)
	s.lit(`,"schema_version":`)
	l.SchemaVersion = uint32(s.uint(32))
	l.Chain = s.str(`,"chain":`)
	s.lit(`,"chain_seq":`)
	l.ChainSeq = s.uint(64)
	l.AggregateKind = s.str(`,"aggregate_kind":`)
	l.AggregateID = s.str(`,"aggregate_id":`)
	l.RecordedAt = s.str(`,"recorded_at":`)
	l.CorrelationID = s.str(`,"correlation_id":`)
	l.CausationID = s.str(`,"causation_id":`)
	l.PrevHash = s.str(`,"prev_hash":`)
	l.Hash = s.str(`,"hash":`)
	if s.maybe(`,"append_remaining":`) {
		l.AppendRemaining = s.uint(64)
	}
	s.lit(`,"payload":`)
	n := len(s.b) - 1
	if !s.ok || n < 0 || s.b[n] != '}' || !verbatimLayout(s.b[:n]) || (checkJSON && !json.Valid(s.b[:n])) {
		return l, false
	}
	if s.shared {
		l.Payload = s.b[:n:n]
	} else {
		l.Payload = bytes.Clone(s.b[:n])
	}
	return l, true
}

// lineScanner consumes a line from the front; ok turns false, for good, at
// the first thing that is not laid out as expected. A shared line stays
// unchanged for as long as its event is used, and text holds its bytes
// too: its strings are cut from text and its payload from b, where a line
// that is not shared has them copied.
type lineScanner struct {
	b      []byte
	text   string
	shared bool
	ok     bool
}

// skip consumes n bytes.
func (s *lineScanner) skip(n int) {
	s.b = s.b[n:]
	if s.shared {
		s.text = s.text[n:]
	}
}

// lit consumes the literal bytes l.
func (s *lineScanner) lit(l string) {
	if !s.maybe(l) {
		s.ok = false
	}
}

// maybe consumes the literal bytes l if the line goes on with them, and
// says whether it did: an optional member.
func (s *lineScanner) maybe(l string) bool {
	if s.ok && len(s.b) >= len(l) && string(s.b[:len(l)]) == l {
		s.skip(len(l))
		return true
	}
	return false
}

// uint consumes a JSON integer that fits in bits.
func (s *lineScanner) uint(bits int) uint64 {
	limit := uint64(1)<<bits - 1 // all ones for 64 too: the shift gives 0
	var v uint64
	i := 0
	for ; s.ok && i < len(s.b) && s.b[i] >= '0' && s.b[i] <= '9'; i++ {
		d := uint64(s.b[i] - '0')
		if v > (limit-d)/10 {
			s.ok = false
		}
		v = v*10 + d
	}
	if i == 0 || (i > 1 && s.b[0] == '0') { // JSON has no leading zeros
		s.ok = false
	}
	if s.ok {
		s.skip(i)
	}
	return v
}

// str consumes the literal key and then a string of printable ASCII
// without escapes.
func (s *lineScanner) str(key string) string {
	s.lit(key)
	if !s.ok || len(s.b) == 0 || s.b[0] != '"' {
		s.ok = false
		return ""
	}
	for i := 1; i < len(s.b); i++ {
		switch c := s.b[i]; {
		case c == '"':
			var v string
			if s.shared {
				v = s.text[1:i]
			} else {
				v = string(s.b[1:i])
			}
			s.skip(i + 1)
			return v
		case c == '\\' || c < 0x20 || c > 0x7e:
			s.ok = false
			return ""
		}
	}
	s.ok = false
	return ""
}

// verbatim reports whether a payload can be written as is, as the last
// member of a line, and be read back to the same bytes by any JSON parser
// or by slicing the line: valid UTF-8 JSON without line breaks (which would
// split the line) and without leading or trailing whitespace (which parsers
// drop). Every payload Tresor writes qualifies; a forged one may not.
func verbatim(p []byte) bool { return verbatimLayout(p) && json.Valid(p) }

// verbatimLayout is verbatim but the JSON check, the costly part.
func verbatimLayout(p []byte) bool {
	return len(p) > 0 && !isJSONSpace(p[0]) && !isJSONSpace(p[len(p)-1]) &&
		bytes.IndexByte(p, '\n') < 0 && bytes.IndexByte(p, '\r') < 0 && utf8.Valid(p)
}

func isJSONSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\r' || c == '\n' }

// appendJSONString appends s as a JSON string that every JSON decoder reads
// back to the same bytes: only '"', '\\' and control characters are escaped
// (no HTML escaping); s must be valid UTF-8.
func appendJSONString(b []byte, s string) ([]byte, error) {
	if !utf8.ValidString(s) {
		return b, fmt.Errorf("string %q is not valid UTF-8: %w", s, ErrInvalid)
	}
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c < 0x20:
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		default:
			b = append(b, c)
		}
	}
	return append(b, '"'), nil
}
