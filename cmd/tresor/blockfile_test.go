package main

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/fdj/tresor/eventstore/eventstoretest"
)

// blockRecord is one message record of a JetStream block file, as the
// storage-fault tests damage them: where it lies and what it holds.
type blockRecord struct {
	off, size int64 // offset in the file and whole length, checksum included
	seq       uint64
	subject   string
	// typ and remaining are the Tresor-Type and Tresor-Append-Remaining
	// headers ("" and -1 when absent).
	typ       string
	remaining int
	data      []byte
}

// blockHeaderBytes is a record's fixed head: length, sequence, timestamp
// and subject length.
const blockHeaderBytes = 4 + 8 + 8 + 2

// blockRecords walks the records of a block file in order, up to the first
// that does not fit: each starts with its length (the top bit says it has
// headers), its sequence (the top bit masked off), a timestamp, the subject
// and, when it has them, the NATS headers, then the data and an 8-byte
// checksum.
func blockRecords(b []byte) []blockRecord {
	var out []blockRecord
	for off := int64(0); off+blockHeaderBytes <= int64(len(b)); {
		rl := binary.LittleEndian.Uint32(b[off:])
		size := int64(rl & 0x7fffffff)
		if size < blockHeaderBytes+8 || off+size > int64(len(b)) {
			break
		}
		rec := b[off : off+size-8]
		r := blockRecord{off: off, size: size, seq: binary.LittleEndian.Uint64(rec[4:]) &^ (1 << 63), remaining: -1}
		slen := int(binary.LittleEndian.Uint16(rec[20:]))
		body := rec[blockHeaderBytes:]
		if slen > len(body) {
			break
		}
		r.subject, body = string(body[:slen]), body[slen:]
		if rl&(1<<31) != 0 && len(body) >= 4 {
			hlen := int(binary.LittleEndian.Uint32(body))
			if 4+hlen > len(body) {
				break
			}
			hdr := body[4 : 4+hlen]
			r.typ = natsHeader(hdr, "Tresor-Type")
			if n, err := strconv.Atoi(natsHeader(hdr, "Tresor-Append-Remaining")); err == nil {
				r.remaining = n
			}
			body = body[4+hlen:]
		}
		r.data = body
		out = append(out, r)
		off += size
	}
	return out
}

// natsHeader is the value of header name in NATS header bytes, "" when
// absent.
func natsHeader(hdr []byte, name string) string {
	_, v, ok := bytes.Cut(hdr, []byte("\r\n"+name+": "))
	if !ok {
		return ""
	}
	v, _, _ = bytes.Cut(v, []byte("\r\n"))
	return string(v)
}

// newestBlock is the path of the highest-numbered block file of the
// stream TRESOR in the data directory: the one a crash leaves its tail in.
func newestBlock(tb testing.TB, data string) string {
	tb.Helper()
	return eventstoretest.NewestBlock(tb, filepath.Join(data, "jetstream", "jetstream", "$G", "streams", "TRESOR"))
}

// String names a record in a failure message.
func (r blockRecord) String() string {
	return fmt.Sprintf("seq %d %s (%d more in its append) at offset %d", r.seq, r.typ, r.remaining, r.off)
}
