package memstore

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/fdj/tresor/domain"
)

// encoder writes the compact binary form of formats 2 and 3: unsigned and signed
// varints, strings interned (the first occurrence written out, later ones
// by their index), times as the difference from the previous time written.
// Its errors are bufio.Writer's, sticky, returned by its Flush.
type encoder struct {
	w    *bufio.Writer
	strs map[string]uint64
	t    int64
	// seq is the last journal line's sequence.
	seq uint64
	buf [binary.MaxVarintLen64]byte
}

// sectionBuffer sizes an encoder's or decoder's buffer: one per section,
// 65 per snapshot, over parts that are buffered whole.
const sectionBuffer = 64 << 10

func newEncoder(w io.Writer) *encoder {
	return &encoder{w: bufio.NewWriterSize(w, sectionBuffer), strs: map[string]uint64{}}
}

func (e *encoder) u(v uint64) {
	n := binary.PutUvarint(e.buf[:], v)
	_, _ = e.w.Write(e.buf[:n])
}

func (e *encoder) i(v int64) {
	n := binary.PutVarint(e.buf[:], v)
	_, _ = e.w.Write(e.buf[:n])
}

func (e *encoder) b(v bool) {
	if v {
		_ = e.w.WriteByte(1)
	} else {
		_ = e.w.WriteByte(0)
	}
}

func (e *encoder) raw(b []byte) { _, _ = e.w.Write(b) }

// str writes s once, then its index: ids, players, event types and
// statuses repeat across millions of rows.
func (e *encoder) str(s string) {
	if i, ok := e.strs[s]; ok {
		e.u(i + 1)
		return
	}
	e.strs[s] = uint64(len(e.strs))
	e.u(0)
	e.u(uint64(len(s)))
	_, _ = e.w.WriteString(s)
}

// tm writes 0 for the zero time, else 1 + the zigzag of the difference
// from the previous time: rows are written in stream order, so most
// differences are small.
func (e *encoder) tm(t time.Time) {
	if t.IsZero() {
		e.u(0)
		return
	}
	ns := t.UnixNano()
	d := ns - e.t
	e.u(uint64(d<<1^d>>63) + 1)
	e.t = ns
}

func (e *encoder) optTm(t *time.Time) {
	e.b(t != nil)
	if t != nil {
		e.tm(*t)
	}
}

func (e *encoder) amount(a domain.Amount) { e.i(int64(a)) }

func (e *encoder) optAmount(a *domain.Amount) {
	e.b(a != nil)
	if a != nil {
		e.amount(*a)
	}
}

// encodeSlice writes s's length + 1 (0 for nil: a nil slice and an empty
// one read back as they were), then each element.
func encodeSlice[T any](e *encoder, s []T, f func(*T)) {
	if s == nil {
		e.u(0)
		return
	}
	e.u(uint64(len(s)) + 1)
	for i := range s {
		f(&s[i])
	}
}

// Bounds on what a decoder allocates for one string or list, whatever the
// bytes say: a corrupt length fails instead of exhausting memory.
const (
	stringBytesMax = 1 << 20
	listLenMax     = 1 << 32
)

// decoder reads what encoder writes. Its first error sticks: every read
// after it returns zero values, and err says what went wrong.
type decoder struct {
	r    *bufio.Reader
	strs []string
	t    int64
	seq  uint64
	err  error
}

func newDecoder(r io.Reader) *decoder { return &decoder{r: bufio.NewReaderSize(r, sectionBuffer)} }

func (d *decoder) fail(err error) {
	if d.err == nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		d.err = err
	}
}

func (d *decoder) u() uint64 {
	if d.err != nil {
		return 0
	}
	v, err := binary.ReadUvarint(d.r)
	if err != nil {
		d.fail(err)
	}
	return v
}

func (d *decoder) i() int64 {
	if d.err != nil {
		return 0
	}
	v, err := binary.ReadVarint(d.r)
	if err != nil {
		d.fail(err)
	}
	return v
}

func (d *decoder) int() int { return int(d.i()) }

func (d *decoder) b() bool {
	if d.err != nil {
		return false
	}
	c, err := d.r.ReadByte()
	if err != nil {
		d.fail(err)
	}
	if c > 1 {
		d.fail(fmt.Errorf("boolean byte %d", c))
	}
	return c == 1
}

func (d *decoder) raw(b []byte) {
	if d.err != nil {
		return
	}
	if _, err := io.ReadFull(d.r, b); err != nil {
		d.fail(err)
	}
}

func (d *decoder) str() string {
	i := d.u()
	if d.err != nil {
		return ""
	}
	if i > 0 {
		if i > uint64(len(d.strs)) {
			d.fail(fmt.Errorf("string %d of %d", i-1, len(d.strs)))
			return ""
		}
		return d.strs[i-1]
	}
	n := d.u()
	if n > stringBytesMax {
		d.fail(fmt.Errorf("string of %d bytes", n))
		return ""
	}
	b := make([]byte, n)
	d.raw(b)
	s := string(b)
	d.strs = append(d.strs, s)
	return s
}

func (d *decoder) tm() time.Time {
	v := d.u()
	if v == 0 || d.err != nil {
		return time.Time{}
	}
	z := v - 1
	d.t += int64(z>>1) ^ -int64(z&1)
	return time.Unix(0, d.t).UTC()
}

func (d *decoder) optTm() *time.Time {
	if !d.b() {
		return nil
	}
	t := d.tm()
	return &t
}

func (d *decoder) amount() domain.Amount { return domain.Amount(d.i()) }

func (d *decoder) optAmount() *domain.Amount {
	if !d.b() {
		return nil
	}
	a := d.amount()
	return &a
}

// count reads a list's length + 1 as encodeSlice writes it: -1 for nil.
func (d *decoder) count() int {
	n := d.u()
	if n > listLenMax {
		d.fail(fmt.Errorf("list of %d", n))
	}
	if d.err != nil {
		return -1
	}
	return int(n) - 1
}

// decodeSlice reads what encodeSlice wrote.
func decodeSlice[T any](d *decoder, f func(*T)) []T {
	n := d.count()
	if n < 0 {
		return nil
	}
	out := make([]T, 0, min(n, 1<<16))
	for range n {
		if d.err != nil {
			return nil
		}
		var v T
		f(&v)
		out = append(out, v)
	}
	return out
}
