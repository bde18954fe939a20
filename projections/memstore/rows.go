package memstore

import (
	"fmt"
	"maps"
	"slices"

	"github.com/fdj/tresor/domain"
	"github.com/fdj/tresor/projections"
)

// The rows of formats 2 and 3, field by field in their declaration order;
// each encoder method has its decoder below it. TestFormat3RoundTripsEveryField
// fails on a field added to a row and forgotten here.

// encodeMap writes m's size, then each key and value in key order.
func encodeMap[V any](e *encoder, m map[string]V, f func(*V)) {
	e.u(uint64(len(m)))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		v := m[k]
		e.str(k)
		f(&v)
	}
}

// decodeMap reads what encodeMap wrote into m.
func decodeMap[V any](d *decoder, m map[string]V, f func() V) {
	n := d.count() + 1
	for i := 0; i < n && d.err == nil; i++ {
		k := d.str()
		m[k] = f()
	}
}

func (e *encoder) account(a *projections.Account) {
	e.str(a.Player)
	e.tm(a.OpenedAt)
	e.amount(a.Balance)
	e.amount(a.Deposited)
	e.amount(a.Withdrawn)
	e.amount(a.Staked)
	e.amount(a.Won)
	e.i(int64(a.Plays))
	e.b(a.SelfExcluded)
	e.optTm(a.SelfExcludedUntil)
	e.optLimit(a.DepositLimit)
	e.optLimit(a.StakeLimit)
	encodeSlice(e, a.Limits, func(l *projections.PeriodLimit) {
		e.str(string(l.Kind))
		e.i(int64(l.PeriodDays))
		e.limit(&l.Limit)
	})
	encodeSlice(e, a.Bans, e.ban)
	e.u(a.LastSeq)
	e.optTm(a.ClosedAt)
}

func (d *decoder) account(a *projections.Account) {
	a.Player = d.str()
	a.OpenedAt = d.tm()
	a.Balance = d.amount()
	a.Deposited = d.amount()
	a.Withdrawn = d.amount()
	a.Staked = d.amount()
	a.Won = d.amount()
	a.Plays = d.int()
	a.SelfExcluded = d.b()
	a.SelfExcludedUntil = d.optTm()
	a.DepositLimit = d.optLimit()
	a.StakeLimit = d.optLimit()
	a.Limits = decodeSlice(d, func(l *projections.PeriodLimit) {
		l.Kind = domain.LimitKind(d.str())
		l.PeriodDays = d.int()
		d.limit(&l.Limit)
	})
	a.Bans = decodeSlice(d, d.ban)
	a.LastSeq = d.u()
	a.ClosedAt = d.optTm()
}

func (e *encoder) limit(l *projections.Limit) {
	e.amount(l.Amount)
	e.optAmount(l.Pending)
	e.optTm(l.PendingFrom)
}

func (d *decoder) limit(l *projections.Limit) {
	l.Amount = d.amount()
	l.Pending = d.optAmount()
	l.PendingFrom = d.optTm()
}

func (e *encoder) optLimit(l *projections.Limit) {
	e.b(l != nil)
	if l != nil {
		e.limit(l)
	}
}

func (d *decoder) optLimit() *projections.Limit {
	if !d.b() {
		return nil
	}
	var l projections.Limit
	d.limit(&l)
	return &l
}

func (e *encoder) optActor(a *domain.Actor) {
	e.b(a != nil)
	if a != nil {
		e.str(a.Role)
		e.str(a.Subject)
	}
}

func (d *decoder) optActor() *domain.Actor {
	if !d.b() {
		return nil
	}
	return &domain.Actor{Role: d.str(), Subject: d.str()}
}

func (e *encoder) ban(b *projections.Ban) {
	e.str(b.Player)
	e.str(b.Ban)
	e.u(b.Seq)
	e.tm(b.At)
	e.str(b.Reference)
	e.str(b.Reason)
	e.optActor(b.By)
	e.u(b.LiftedSeq)
	e.optTm(b.LiftedAt)
	e.str(b.LiftReference)
	e.str(b.LiftReason)
	e.optActor(b.LiftedBy)
}

func (d *decoder) ban(b *projections.Ban) {
	b.Player = d.str()
	b.Ban = d.str()
	b.Seq = d.u()
	b.At = d.tm()
	b.Reference = d.str()
	b.Reason = d.str()
	b.By = d.optActor()
	b.LiftedSeq = d.u()
	b.LiftedAt = d.optTm()
	b.LiftReference = d.str()
	b.LiftReason = d.str()
	b.LiftedBy = d.optActor()
}

func (e *encoder) suspension(x *projections.Suspension) {
	e.str(x.ID)
	e.str(x.Scope)
	e.u(x.Seq)
	e.tm(x.At)
	e.str(x.Reason)
	e.optActor(x.By)
	e.u(x.ResumedSeq)
	e.optTm(x.ResumedAt)
	e.str(x.ResumeReason)
	e.optActor(x.ResumedBy)
}

func (d *decoder) suspension(x *projections.Suspension) {
	x.ID = d.str()
	x.Scope = d.str()
	x.Seq = d.u()
	x.At = d.tm()
	x.Reason = d.str()
	x.By = d.optActor()
	x.ResumedSeq = d.u()
	x.ResumedAt = d.optTm()
	x.ResumeReason = d.str()
	x.ResumedBy = d.optActor()
}

func (e *encoder) limitChange(l *projections.LimitChange) {
	e.str(l.Player)
	e.str(string(l.Kind))
	e.i(int64(l.PeriodDays))
	e.u(l.Seq)
	e.tm(l.At)
	e.amount(l.Limit)
	e.tm(l.EffectiveAt)
}

func (d *decoder) limitChange(l *projections.LimitChange) {
	l.Player = d.str()
	l.Kind = domain.LimitKind(d.str())
	l.PeriodDays = d.int()
	l.Seq = d.u()
	l.At = d.tm()
	l.Limit = d.amount()
	l.EffectiveAt = d.tm()
}

// journalLine writes a line's sequence as its difference from the
// previous line's (lines of an account are in stream order).
func (e *encoder) journalLine(l *projections.JournalLine) {
	e.i(int64(l.Seq - e.seq))
	e.seq = l.Seq
	e.i(int64(l.Line))
	e.tm(l.At)
	e.str(l.Account)
	e.str(string(l.Side))
	e.amount(l.Amount)
	e.str(l.Counterpart)
	e.str(l.EventType)
	e.str(l.Ref)
	e.optAmount(l.BalanceAfter)
}

func (d *decoder) journalLine(l *projections.JournalLine) {
	d.seq += uint64(d.i())
	l.Seq = d.seq
	l.Line = d.int()
	l.At = d.tm()
	l.Account = d.str()
	l.Side = projections.Side(d.str())
	l.Amount = d.amount()
	l.Counterpart = d.str()
	l.EventType = d.str()
	l.Ref = d.str()
	l.BalanceAfter = d.optAmount()
}

func (e *encoder) emission(m *projections.Emission) {
	e.str(m.ID)
	e.amount(m.Price)
	e.i(int64(m.Blocks))
	e.str(m.RulesVersion)
	e.tm(m.CreatedAt)
}

func (d *decoder) emission() projections.Emission {
	return projections.Emission{ID: d.str(), Price: d.amount(), Blocks: d.int(), RulesVersion: d.str(), CreatedAt: d.tm()}
}

func (e *encoder) counters(c *projections.Counters) {
	e.i(int64(c.UnitsSold))
	e.amount(c.Sales)
	e.amount(c.PrizesPaid)
	e.amount(c.PrizesSettled)
	e.amount(c.PrizesOwed)
	e.amount(c.PrizeFund)
	e.amount(c.StakeMismatch)
	e.amount(c.SettleMismatch)
}

func (d *decoder) counters(c *projections.Counters) {
	c.UnitsSold = d.int()
	c.Sales = d.amount()
	c.PrizesPaid = d.amount()
	c.PrizesSettled = d.amount()
	c.PrizesOwed = d.amount()
	c.PrizeFund = d.amount()
	c.StakeMismatch = d.amount()
	c.SettleMismatch = d.amount()
}

func (e *encoder) block(b *projections.BlockRow) {
	e.str(b.ID)
	e.str(b.Emission)
	e.i(int64(b.Index))
	e.amount(b.Price)
	e.i(int64(b.Units))
	e.str(string(b.State))
	e.raw(b.Commitment.SeedHash[:])
	e.raw(b.Commitment.Root[:])
	e.i(int64(b.Commitment.Units))
	e.b(b.Seed != nil)
	if b.Seed != nil {
		e.raw(b.Seed[:])
	}
	e.tm(b.OpenedAt)
	e.u(b.OpenedSeq)
	e.optTm(b.ClosedAt)
	e.i(int64(b.Settled))
	e.i(int64(b.BySystem))
	e.counters(&b.Counters)
	for _, t := range b.Tiers {
		e.i(int64(t.Lots))
		e.amount(t.Prize)
		e.i(int64(t.Assigned))
		e.i(int64(t.Paid))
	}
	e.u(b.LastSeq)
}

func (d *decoder) block(b *projections.BlockRow) {
	b.ID = d.str()
	b.Emission = d.str()
	b.Index = d.int()
	b.Price = d.amount()
	b.Units = d.int()
	b.State = domain.BlockState(d.str())
	d.raw(b.Commitment.SeedHash[:])
	d.raw(b.Commitment.Root[:])
	b.Commitment.Units = d.int()
	if d.b() {
		b.Seed = new(domain.Seed)
		d.raw(b.Seed[:])
	}
	b.OpenedAt = d.tm()
	b.OpenedSeq = d.u()
	b.ClosedAt = d.optTm()
	b.Settled = d.int()
	b.BySystem = d.int()
	d.counters(&b.Counters)
	for i := range b.Tiers {
		t := &b.Tiers[i]
		t.Lots = d.int()
		t.Prize = d.amount()
		t.Assigned = d.int()
		t.Paid = d.int()
	}
	b.LastSeq = d.u()
}

// play writes a play after the play staked at prevSeq, its proof's path
// relative to the last proof of its block written (proofs): units sold
// one after the other share the upper levels of their paths, most of a
// proof's 19 hashes.
func (e *encoder) play(p *projections.Play, prevSeq uint64, proofs map[string]*domain.UnitProof) {
	e.str(p.ID)
	e.str(p.Player)
	e.str(p.Block)
	e.u(uint64(p.Unit))
	e.u(p.Seq - prevSeq)
	e.tm(p.At)
	e.amount(p.Stake)
	e.str(string(p.Status))
	e.b(p.Proof != nil)
	if pr := p.Proof; pr != nil {
		e.u(uint64(pr.Unit))
		e.u(uint64(pr.Tier))
		e.raw(pr.Salt[:])
		shared := 0
		if prev := proofs[p.Block]; prev != nil {
			for shared < min(len(pr.Path), len(prev.Path)) && pr.Path[len(pr.Path)-1-shared] == prev.Path[len(prev.Path)-1-shared] {
				shared++
			}
		}
		encodeSlice(e, pr.Path[:len(pr.Path)-shared:len(pr.Path)-shared], func(h *[32]byte) { e.raw(h[:]) })
		if pr.Path != nil {
			e.u(uint64(shared))
		}
		proofs[p.Block] = pr
	}
	encodeSlice(e, p.Throws, e.throw)
	e.b(p.Tier != nil)
	if p.Tier != nil {
		e.u(uint64(*p.Tier))
	}
	e.optAmount(p.Prize)
	e.optTm(p.SettledAt)
	e.u(settledAfter(p))
	e.amount(p.BalanceBefore)
	e.amount(p.BalanceAfter)
}

// settledAfter is how far after its stake a play's settlement is, 0 while
// it is in progress: a settlement always follows its stake, so the
// distance is positive, and small.
func settledAfter(p *projections.Play) uint64 {
	if p.SettledSeq == 0 {
		return 0
	}
	return p.SettledSeq - p.Seq
}

func (d *decoder) play(p *projections.Play, prevSeq uint64, proofs map[string]*domain.UnitProof) {
	p.ID = d.str()
	p.Player = d.str()
	p.Block = d.str()
	p.Unit = uint32(d.u())
	p.Seq = prevSeq + d.u()
	p.At = d.tm()
	p.Stake = d.amount()
	p.Status = projections.PlayStatus(d.str())
	if d.b() {
		pr := &domain.UnitProof{Unit: uint32(d.u()), Tier: domain.Tier(d.u())}
		d.raw(pr.Salt[:])
		pr.Path = decodeSlice(d, func(h *[32]byte) { d.raw(h[:]) })
		if pr.Path != nil {
			shared := int(d.u())
			prev := proofs[p.Block]
			if shared > 0 && (prev == nil || shared > len(prev.Path)) {
				d.fail(fmt.Errorf("play %s: a proof sharing %d hashes with the previous of its block", p.ID, shared))
				return
			}
			if shared > 0 {
				pr.Path = append(pr.Path, prev.Path[len(prev.Path)-shared:]...)
			}
		}
		p.Proof = pr
		proofs[p.Block] = pr
	}
	p.Throws = decodeSlice(d, d.throw)
	if d.b() {
		t := domain.Tier(d.u())
		p.Tier = &t
	}
	p.Prize = d.optAmount()
	p.SettledAt = d.optTm()
	if after := d.u(); after > 0 {
		p.SettledSeq = p.Seq + after
	}
	p.BalanceBefore = d.amount()
	p.BalanceAfter = d.amount()
}

func (e *encoder) throw(t *projections.Throw) {
	e.i(int64(t.Throw))
	e.tm(t.At)
	e.b(t.BySystem)
	r := &t.Result
	e.u(uint64(r.Direction))
	e.i(int64(r.Steps))
	e.i(int64(r.Pawn.Row))
	e.i(int64(r.Pawn.Col))
	e.i(int64(r.Chest))
	e.u(uint64(r.Symbol))
}

func (d *decoder) throw(t *projections.Throw) {
	t.Throw = d.int()
	t.At = d.tm()
	t.BySystem = d.b()
	r := &t.Result
	r.Direction = domain.Direction(d.u())
	r.Steps = d.int()
	r.Pawn.Row = d.int()
	r.Pawn.Col = d.int()
	r.Chest = d.int()
	r.Symbol = domain.Symbol(d.u())
}

func (e *encoder) day(day *projections.Day) {
	e.str(day.Day)
	e.str(day.Emission)
	e.counters(&day.Counters)
	e.i(int64(day.Settled))
	e.amount(day.SettledStakes)
	e.i(int64(day.BySystem))
}

func (d *decoder) day() *projections.Day {
	day := &projections.Day{Day: d.str(), Emission: d.str()}
	d.counters(&day.Counters)
	day.Settled = d.int()
	day.SettledStakes = d.amount()
	day.BySystem = d.int()
	return day
}
