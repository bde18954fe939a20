package api

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fdj/tresor/domain"
	"github.com/fdj/tresor/projections"
)

// Bounds of the revoked set's freshness. A node learns revocations by
// asking the stream every RevocationsPollEvery; while its last complete
// answer is older than RevocationsStaleAfter it refuses every token (503):
// a token revoked on another node is thus never accepted here more than
// RevocationsStaleAfter after its revocation was acknowledged.
const (
	RevocationsPollEvery  = 200 * time.Millisecond
	RevocationsStaleAfter = 1500 * time.Millisecond
	// RevocationSkewDefault is how far apart the writer's clock (which
	// stamps a subject's revocation) and a token issuer's (which stamps
	// its iat) may be: a subject's revocation covers the tokens issued up
	// to that long after it. It is the leeway the provider's tokens are
	// verified with: an issuer whose clock is that far ahead is trusted.
	RevocationSkewDefault = tokenLeeway
	// revocationsPageMax bounds one page of GET /v1/token-revocations.
	revocationsPageMax = 1000
)

// Revocation is a revocation of tokens as the API answers it: of one
// token (JTI) or of every token of a subject issued up to At plus the
// clock skew allowed. Its JSON keys are a contract: add, never rename.
type Revocation struct {
	// Seq is the stream sequence of its TokenRevoked, which names it.
	Seq     uint64        `json:"seq"`
	At      time.Time     `json:"at"`
	JTI     string        `json:"jti,omitempty"`
	Subject string        `json:"subject,omitempty"`
	Reason  string        `json:"reason"`
	By      *domain.Actor `json:"by,omitempty"`
	// CoversIssuedUntil is, for a subject's, the latest issue time (iat)
	// of the tokens it refuses.
	CoversIssuedUntil *time.Time `json:"covers_issued_until,omitempty"`
	key               string
}

// Revocations is the set of revoked tokens a node checks every request
// against, in memory. It is fed from the stream by whoever follows it
// (Apply, then Fresh); reading it takes a read lock and two map lookups.
type Revocations struct {
	skew time.Duration

	mu        sync.RWMutex
	all       []Revocation
	byJTI     map[string]int
	bySubject map[string]time.Time
	// pseudonyms says some subject's revocation is matched by its
	// pseudonym: a token's subject is then named so too, by pseudonym
	// (the server's keyring; set once, by NewServer).
	pseudonyms bool
	pseudonym  func(subject string) string
	// applied is the sequence of the last revocation applied, position
	// the stream position up to which every revocation is applied.
	applied, position uint64
	changed           chan struct{}

	// freshAt is the instant (Unix ns) before which every revocation
	// acknowledged is applied; 0 until the first complete read.
	freshAt atomic.Int64
}

// NewRevocations returns an empty set whose subjects' revocations cover
// the tokens issued up to skew after them.
func NewRevocations(skew time.Duration) *Revocations {
	return &Revocations{skew: skew, byJTI: map[string]int{}, bySubject: map[string]time.Time{},
		changed: make(chan struct{})}
}

// Applied is the stream sequence of the last revocation applied (0: none).
func (v *Revocations) Applied() uint64 {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.applied
}

// Apply adds the revocation recorded at seq and at; one at or before the
// last applied is ignored (a read again after an error).
func (v *Revocations) Apply(seq uint64, at time.Time, e *domain.TokenRevoked) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if seq <= v.applied {
		return
	}
	r := Revocation{Seq: seq, At: at.UTC(), JTI: e.JTI, Subject: e.Subject, Reason: e.Reason, By: e.By, key: e.Key}
	i := len(v.all)
	if r.JTI != "" {
		v.byJTI[r.JTI] = i
	}
	if r.Subject != "" {
		until := r.At.Add(v.skew)
		r.CoversIssuedUntil = &until
		// A sealed subject is matched by its pseudonym, which outlives
		// the subject's erasure; one recorded in clear, by itself.
		match := cmp.Or(e.SubjectRef, r.Subject)
		if until.After(v.bySubject[match]) {
			v.bySubject[match] = until
		}
		v.pseudonyms = v.pseudonyms || e.SubjectRef != ""
	}
	v.all = append(v.all, r)
	v.applied = seq
	v.wake()
}

// Fresh records that every revocation acknowledged before asOf, the
// stream holding position then, is applied.
func (v *Revocations) Fresh(asOf time.Time, position uint64) {
	if ns := asOf.UnixNano(); ns > v.freshAt.Load() {
		v.freshAt.Store(ns)
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if position > v.position {
		v.position = position
		v.wake()
	}
}

// wake tells the waiters that the set changed; v.mu is held.
func (v *Revocations) wake() {
	close(v.changed)
	v.changed = make(chan struct{})
}

// age is how long ago the set was last known current (0 when that was
// after now: a read finished while the caller looked at the clock), and
// false before the first read.
func (v *Revocations) age(now time.Time) (time.Duration, bool) {
	fresh := v.freshAt.Load()
	if fresh == 0 {
		return 0, false
	}
	return max(0, now.Sub(time.Unix(0, fresh))), true
}

// matchBy names tokens' subjects by pseudonym, as sealed revocations
// match them.
func (v *Revocations) matchBy(pseudonym func(subject string) string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.pseudonym = pseudonym
}

// check refuses a token revoked (errTokenRevoked), and every token while
// the set is not known to be current (ErrNotReady).
func (v *Revocations) check(c *Claims, now time.Time) error {
	age, read := v.age(now)
	if !read {
		return fmt.Errorf("%w: the token revocations are not read yet", ErrNotReady)
	}
	if age > RevocationsStaleAfter {
		return fmt.Errorf("%w: the token revocations were last read %s ago", ErrNotReady, age.Round(time.Millisecond))
	}
	subject := c.Subject
	if subject == "" {
		subject = c.Player
	}
	v.mu.RLock()
	sealed, pseudonym := v.pseudonyms, v.pseudonym
	v.mu.RUnlock()
	ref := ""
	if sealed && subject != "" && pseudonym != nil {
		ref = pseudonym(subject) // outside the lock: it may read the data keys' bucket
	}
	v.mu.RLock()
	defer v.mu.RUnlock()
	if _, ok := v.byJTI[c.ID]; ok && c.ID != "" {
		return errTokenRevoked
	}
	// A token without iat may have been issued at any time: a subject's
	// revocation covers it.
	for _, match := range []string{subject, ref} {
		if until, ok := v.bySubject[match]; ok && match != "" && (c.IssuedAt == nil || !c.IssuedAt.After(until)) {
			return errTokenRevoked
		}
	}
	return nil
}

// wait waits until done reports true of the set, or ctx ends.
func (v *Revocations) wait(ctx context.Context, done func() bool) error {
	for {
		v.mu.RLock()
		ok, ch := done(), v.changed
		v.mu.RUnlock()
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: the token revocations are not read up to this one yet; read again shortly", ErrNotReady)
		case <-ch:
		}
	}
}

// page returns up to limit revocations after sequence after, oldest first.
func (v *Revocations) page(after uint64, limit int) []Revocation {
	v.mu.RLock()
	defer v.mu.RUnlock()
	out := []Revocation{}
	for _, r := range v.all {
		if r.Seq > after && len(out) < limit {
			out = append(out, r)
		}
	}
	return out
}

// errTokenRevoked answers a revoked token.
var errTokenRevoked = &domain.Error{Code: codeTokenRevoked, Message: "this token is revoked"}

// errNoRevocations answers the revocation endpoints of a server that
// checks none (an API over read models alone).
var errNoRevocations = &domain.Error{Code: domain.CodeNotFound, Message: "this server checks no token revocations"}

// revokeRequest is the body of POST /v1/token-revocations.
type revokeRequest struct {
	JTI     string `json:"jti"`
	Subject string `json:"subject"`
	Reason  string `json:"reason"`
}

// revoke records a revocation (201), or answers the one its key recorded
// (200: a retry), once this node refuses the tokens it names.
func (s *Server) revoke(r *http.Request, c *Claims) (int, any, error) {
	if s.cfg.Revocations == nil {
		return 0, nil, errNoRevocations
	}
	var req revokeRequest
	if err := decode(r, &req); err != nil {
		return 0, nil, err
	}
	key, err := idempotencyKey(r)
	if err != nil {
		return 0, nil, err
	}
	by, err := s.actor(r, c)
	if err != nil {
		return 0, nil, err
	}
	res, err := s.execute(r.Context(), domain.RevokeTokens{JTI: req.JTI, Subject: req.Subject, Reason: req.Reason, Key: key, By: by})
	if err != nil {
		return 0, nil, err
	}
	// The answer is the revocation as this node holds it: once held, this
	// node refuses its tokens.
	v, seq := s.cfg.Revocations, res.LastSeq()
	ctx, cancel := context.WithTimeout(r.Context(), projections.WaitMax)
	defer cancel()
	if err := v.wait(ctx, func() bool { return v.applied >= seq || v.position >= seq }); err != nil {
		return 0, nil, err
	}
	if res.Replay != nil {
		// The key's revocation, the newest with it: the ledger
		// remembers a key within its window only.
		found, ok := v.find(func(x Revocation) bool { return x.key == key })
		if !ok {
			return 0, nil, fmt.Errorf("revocation of key %q not found up to sequence %d", key, seq)
		}
		return http.StatusOK, found, nil
	}
	found, ok := v.find(func(x Revocation) bool { return x.Seq == seq })
	if !ok {
		return 0, nil, fmt.Errorf("revocation at sequence %d not found", seq)
	}
	return http.StatusCreated, found, nil
}

// find returns the newest revocation that match says is the one.
func (v *Revocations) find(match func(Revocation) bool) (Revocation, bool) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	for i := len(v.all) - 1; i >= 0; i-- {
		if match(v.all[i]) {
			return v.all[i], true
		}
	}
	return Revocation{}, false
}

// revocationsJSON is a page of revocations.
type revocationsJSON struct {
	Revocations []Revocation `json:"revocations"`
	// Next is the cursor (after) of the next page, absent when the page
	// was not full.
	Next string `json:"next,omitempty"`
}

// revocations answers GET /v1/token-revocations?after=&limit=&min_seq=.
func (s *Server) revocations(r *http.Request, _ *Claims) (int, any, error) {
	if s.cfg.Revocations == nil {
		return 0, nil, errNoRevocations
	}
	q := r.URL.Query()
	limit, after, err := pageQuery(q.Get("limit"), q.Get("after"), revocationsPageMax)
	if err != nil {
		return 0, nil, err
	}
	seq, err := s.minSeq(r)
	if err != nil {
		return 0, nil, err
	}
	rv := s.cfg.Revocations
	ctx, cancel := context.WithTimeout(r.Context(), projections.WaitMax)
	defer cancel()
	if err := rv.wait(ctx, func() bool { return rv.position >= seq || rv.applied >= seq }); err != nil {
		return 0, nil, err
	}
	out := revocationsJSON{Revocations: s.cfg.Revocations.page(after, limit)}
	if len(out.Revocations) == limit {
		out.Next = strconv.FormatUint(out.Revocations[limit-1].Seq, 10)
	}
	return http.StatusOK, out, nil
}

// pageQuery reads a page's limit (1 to max, 100 by default) and its
// cursor after (a sequence, 0 by default).
func pageQuery(limitText, afterText string, max int) (limit int, after uint64, err error) {
	limit = min(100, max)
	if limitText != "" {
		if limit, err = strconv.Atoi(limitText); err != nil || limit < 1 || limit > max {
			return 0, 0, invalidf("limit %.32q: want 1 to %d", limitText, max)
		}
	}
	if afterText != "" {
		if after, err = strconv.ParseUint(afterText, 10, 64); err != nil {
			return 0, 0, invalidf("after %.32q: want a sequence", afterText)
		}
	}
	return limit, after, nil
}
