package feed

import (
	"strconv"
	"time"
)

// The payloads are written by hand, in the bytes encoding/json gives for
// Postings and PlaySettled (TestPayloadsAreJSONMarshal): reflection was a
// tenth of the feed's read. Anything out of the ordinary (a string that
// JSON escapes, a tier or a time JSON refuses) makes them give up, and
// the builder falls back to encoding/json, which decides.

// appendJSON appends the postings as json.Marshal would, or returns ok
// false.
func (p *Postings) appendJSON(b []byte) (_ []byte, ok bool) {
	b, ok = p.Header.appendJSON(b)
	for _, f := range []struct{ key, v string }{
		{`,"player":`, p.Player}, {`,"play":`, p.Play}, {`,"block":`, p.Block}, {`,"adjustment":`, p.Adjustment},
	} {
		if f.v != "" {
			b = append(b, f.key...)
			b, ok = appendString(b, f.v, ok)
		}
	}
	if len(p.Lines) == 0 {
		return b, false // null, json's business
	}
	b = append(b, `,"lines":[`...)
	for i, l := range p.Lines {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"account":`...)
		b, ok = appendString(b, l.Account, ok)
		b = append(b, `,"side":`...)
		b, ok = appendString(b, string(l.Side), ok)
		b = append(b, `,"amount":"`...)
		b, _ = l.Amount.AppendText(b)
		b = append(b, `"}`...)
	}
	return append(b, "]}"...), ok
}

// appendJSON appends the settled play as json.Marshal would, or returns ok
// false.
func (p *PlaySettled) appendJSON(b []byte) (_ []byte, ok bool) {
	b, ok = p.Header.appendJSON(b)
	b = append(b, `,"play":`...)
	b, ok = appendString(b, p.Play, ok)
	b = append(b, `,"player":`...)
	b, ok = appendString(b, p.Player, ok)
	b = append(b, `,"block":`...)
	b, ok = appendString(b, p.Block, ok)
	b = append(b, `,"unit":`...)
	b = strconv.AppendUint(b, uint64(p.Unit), 10)
	b = append(b, `,"stake":"`...)
	b, _ = p.Stake.AppendText(b)
	b = append(b, `","tier":`...)
	ok = ok && p.Tier.Valid()
	b, ok = appendString(b, p.Tier.ID(), ok)
	b = append(b, `,"prize":"`...)
	b, _ = p.Prize.AppendText(b)
	b = append(b, `","by_system":`...)
	b = strconv.AppendBool(b, p.BySystem)
	return append(b, '}'), ok
}

// appendJSON opens the object and writes the header's members.
func (h *Header) appendJSON(b []byte) (_ []byte, ok bool) {
	b = append(b, `{"kind":`...)
	b, ok = appendString(b, string(h.Kind), true)
	b = append(b, `,"seq":`...)
	b = strconv.AppendUint(b, h.Seq, 10)
	b = append(b, `,"event_id":`...)
	b, ok = appendString(b, h.EventID, ok)
	b = append(b, `,"event_type":`...)
	b, ok = appendString(b, h.EventType, ok)
	b = append(b, `,"at":"`...)
	// time.Time.MarshalJSON refuses years outside 0 to 9999.
	ok = ok && h.At.Year() >= 0 && h.At.Year() <= 9999
	b = h.At.AppendFormat(b, time.RFC3339Nano)
	return append(b, '"'), ok
}

// appendString appends s quoted when JSON writes it as is (printable
// ASCII but for '"', '\\' and the HTML characters JSON escapes); ok turns
// false otherwise.
func appendString(b []byte, s string, ok bool) ([]byte, bool) {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			ok = false
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"'), ok
}
