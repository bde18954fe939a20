package audit

import (
	"fmt"
	"sort"
	"time"

	"github.com/fdj/tresor/domain"
	"github.com/fdj/tresor/eventstore"
)

// controlState is what the auditor re-derives of the responsible-gaming
// controls, from the events alone: the settings in force, and per player
// the limits of every period, the self-exclusions, the bans and the
// movements the limits sum. It is the auditor's own, as the rest of its
// state: it shares no code with domain.Ledger, only domain's constants and
// the settings' validation.
type controlState struct {
	// settings are in force from the stream's start (the baseline) or from
	// the last SettingsAdopted; known is false from a seal until one is
	// seen, and the checks that depend on them are then skipped.
	settings domain.Settings
	known    bool
	players  map[string]*playerControls
	counts   ControlCounts
	// suspensions holds every suspension of sales recorded, by id;
	// salesAnchored is false for an audit started from a seal, which
	// does not know the suspensions recorded before it.
	suspensions   map[string]*auditSuspension
	salesAnchored bool
	// salesInForce counts the suspensions in force among them.
	salesInForce int
	// adjustments holds every adjustment proposed, by id; adjustAnchored
	// is false for an audit started from a seal, which does not know the
	// proposals recorded before it.
	adjustments    map[string]*auditAdjustment
	adjustAnchored bool
	// erasures holds every erasure proposed, by id; eraseAnchored as
	// adjustAnchored.
	erasures      map[string]*auditErasure
	eraseAnchored bool
}

// ControlCounts counts the controls an audit re-derived.
type ControlCounts struct {
	LimitChanges    int `json:"limit_changes"`
	SelfExclusions  int `json:"self_exclusions"`
	Terms           int `json:"self_exclusion_terms"`
	Bans            int `json:"bans"`
	BansLifted      int `json:"bans_lifted"`
	SettingsAdopted int `json:"settings_adopted"`
	// Suspensions of sales recorded, and their ends.
	Suspensions        int `json:"sales_suspensions"`
	SuspensionsResumed int `json:"sales_suspensions_resumed"`
	// Accounts closed, and reopened.
	Closures   int `json:"account_closures"`
	Reopenings int `json:"account_reopenings"`
	// Adjustments proposed, approved and rejected.
	AdjustmentsProposed int `json:"adjustments_proposed"`
	AdjustmentsApproved int `json:"adjustments_approved"`
	AdjustmentsRejected int `json:"adjustments_rejected"`
	// Erasures of personal data proposed, recorded and rejected.
	ErasuresProposed int `json:"erasures_proposed"`
	Erasures         int `json:"erasures"`
	ErasuresRejected int `json:"erasures_rejected"`
}

// playerControls are one player's controls. An account first seen after
// the seal an audit started from is not anchored: what was set before is
// unknown, so its movements are not checked against controls.
type playerControls struct {
	anchored  bool
	closed    bool
	closedAt  time.Time
	forGood   bool
	until     time.Time
	bans      map[string]bool // id → in force
	limits    map[domain.LimitKey]*auditLimit
	movements map[domain.LimitKind]*runningSum
}

// auditLimit is a limit with the raise it waits for.
type auditLimit struct {
	amount, pending domain.Amount
	from            time.Time
	hasPending      bool
}

func (l *auditLimit) at(t time.Time) domain.Amount {
	if l.hasPending && !t.Before(l.from) {
		return l.pending
	}
	return l.amount
}

// runningSum keeps the movements of the longest limit period with their
// running totals, so that any period's sum is a binary search.
type runningSum struct {
	at   []int64
	cum  []domain.Amount
	base domain.Amount
}

func (r *runningSum) last() domain.Amount {
	if n := len(r.cum); n > 0 {
		return r.cum[n-1]
	}
	return r.base
}

// sum returns the movements recorded after since.
func (r *runningSum) sum(since time.Time) domain.Amount {
	cut := since.UnixNano()
	i := sort.Search(len(r.at), func(i int) bool { return r.at[i] > cut })
	before := r.base
	if i > 0 {
		before = r.cum[i-1]
	}
	return r.last() - before
}

func (r *runningSum) add(t time.Time, a domain.Amount) {
	cut := t.Add(-domain.LimitPeriodMaxDays * 24 * time.Hour).UnixNano()
	if i := sort.Search(len(r.at), func(i int) bool { return r.at[i] > cut }); i > 0 {
		r.base = r.cum[i-1]
		r.at, r.cum = r.at[i:], r.cum[i:]
	}
	total := r.last() + a
	r.at, r.cum = append(r.at, t.UnixNano()), append(r.cum, total)
}

func newControlState(partial bool) *controlState {
	return &controlState{settings: domain.BaselineSettings(), known: !partial, players: map[string]*playerControls{},
		suspensions: map[string]*auditSuspension{}, salesAnchored: !partial,
		adjustments: map[string]*auditAdjustment{}, adjustAnchored: !partial, erasures: map[string]*auditErasure{}, eraseAnchored: !partial}
}

// player returns a player's controls, unanchored when first seen here
// without its AccountOpened.
func (c *controlState) player(id string) *playerControls {
	p := c.players[id]
	if p == nil {
		p = &playerControls{limits: map[domain.LimitKey]*auditLimit{}, movements: map[domain.LimitKind]*runningSum{}}
		c.players[id] = p
	}
	return p
}

// control re-derives the controls from one event and checks the events
// they govern: deposits and stakes accepted against an exclusion, a ban or
// a limit, limits raised early, exclusions shortened, bans lifted twice,
// exceptional actions without a reason.
func (s *state) control(ev *eventstore.RecordedEvent, e domain.Event) {
	c, seq, at := s.ctl, ev.Sequence, ev.RecordedAt
	switch e := e.(type) {
	case *domain.AccountOpened:
		c.player(e.Player).anchored = true
	case *domain.SettingsAdopted:
		c.counts.SettingsAdopted++
		if err := e.Settings.Validate(); err != nil {
			s.bad(seq, CodeSettingsInvalid, "settings "+e.Version, "settings within their bounds", err.Error())
			return
		}
		c.settings, c.known = e.Settings, true
	case *domain.LimitChanged:
		c.counts.LimitChanges++
		s.limitChanged(seq, at, e)
	case *domain.SelfExcluded:
		c.counts.SelfExclusions++
		c.player(e.Player).forGood = true
		s.needReason(seq, "self-exclusion of "+e.Player, e.By, e.Reason)
	case *domain.SelfExcludedUntil:
		c.counts.Terms++
		s.term(seq, at, e)
	case *domain.PlayerBanned:
		c.counts.Bans++
		p := c.player(e.Player)
		subject := "ban " + e.Ban + " of " + e.Player
		if _, seen := p.bans[e.Ban]; seen {
			s.bad(seq, CodeBanInvalid, subject, "a ban id used once", "recorded again")
		}
		if e.Reference == "" || e.Reason == "" {
			s.bad(seq, CodeBanInvalid, subject, "the decision's reference and a reason", fmt.Sprintf("reference %q, reason %q", e.Reference, e.Reason))
		}
		if p.bans == nil {
			p.bans = map[string]bool{}
		}
		p.bans[e.Ban] = true
	case *domain.BanLifted:
		c.counts.BansLifted++
		p := c.player(e.Player)
		subject := "ban " + e.Ban + " of " + e.Player
		if inForce, seen := p.bans[e.Ban]; (!seen && p.anchored) || (seen && !inForce) {
			s.bad(seq, CodeBanInvalid, subject, "the lifting of a ban in force", "no such ban in force")
		}
		if e.Reference == "" || e.Reason == "" {
			s.bad(seq, CodeBanInvalid, subject, "the decision's reference and a reason", fmt.Sprintf("reference %q, reason %q", e.Reference, e.Reason))
		}
		if p.bans != nil {
			p.bans[e.Ban] = false
		}
	case *domain.TokenRevoked:
		s.tokenRevoked(seq, e)
	case *domain.BlockClosed:
		if b := s.blocks[e.Block]; b != nil && b.state == blockOpen && e.By != nil {
			s.needReason(seq, "early close of block "+e.Block, e.By, e.Reason)
		}
	case *domain.FundsDeposited:
		s.governed(seq, at, e.Player, domain.DepositLimit, e.Amount, c.settings.DepositLimitRequired)
		s.closedMovement(seq, e, e.Player)
	case *domain.FundsWithdrawn:
		s.closedMovement(seq, e, e.Player)
	case *domain.PrizePaid:
		s.closedMovement(seq, e, e.Player)
	case *domain.StakePlaced:
		s.governed(seq, at, e.Player, domain.StakeLimit, e.Stake, c.settings.StakeLimitRequired)
		s.stakeSuspended(seq, e)
		s.closedMovement(seq, e, e.Player)
	case *domain.AccountClosed:
		c.counts.Closures++
		s.accountClosed(seq, at, e)
	case *domain.AccountReopened:
		c.counts.Reopenings++
		s.accountReopened(seq, e)
	case *domain.PersonalDataErasureProposed:
		s.erasureProposed(seq, at, e)
	case *domain.PersonalDataErased:
		s.personalDataErased(seq, at, ev.SchemaVersion, e)
	case *domain.PersonalDataErasureRejected:
		s.erasureRejected(seq, at, e)
	case *domain.SalesSuspended:
		s.salesSuspended(seq, e)
	case *domain.SalesResumed:
		s.salesResumed(seq, e)
	case *domain.AdjustmentProposed:
		s.adjustmentProposed(seq, at, e)
	case *domain.AdjustmentApproved:
		s.adjustmentApproved(seq, at, e)
	case *domain.AdjustmentRejected:
		s.adjustmentRejected(seq, at, e)
	}
}

// tokenRevoked checks a revocation of tokens: access is withdrawn by an
// operator, from one token or one subject, and says why.
func (s *state) tokenRevoked(seq uint64, e *domain.TokenRevoked) {
	const subject = "token revocation"
	if e.By == nil || e.By.Role != domain.RoleOperator {
		s.bad(seq, CodeRevocationInvalid, subject, "recorded by an operator", fmt.Sprintf("by %v", e.By))
	}
	if (e.JTI == "") == (e.Subject == "" && e.SubjectRef == "") {
		s.bad(seq, CodeRevocationInvalid, subject, "one token (jti) or one subject", fmt.Sprintf("jti %q, subject given %t", e.JTI, e.Subject != "" || e.SubjectRef != ""))
	}
	if e.By != nil {
		s.needReason(seq, subject, e.By, e.Reason)
	}
}

// needReason reports an exceptional action of the operator's staff without
// a reason.
func (s *state) needReason(seq uint64, subject string, by *domain.Actor, reason string) {
	if by.Staff() && reason == "" {
		s.bad(seq, CodeReasonMissing, subject, "a reason, recorded by "+by.Role+" "+by.Subject, "none")
	}
}

// limitChanged folds a limit change and checks it: a first limit or a
// lowering applies at once, a raise after the settings' delay, on a period
// the settings offer.
func (s *state) limitChanged(seq uint64, at time.Time, e *domain.LimitChanged) {
	c := s.ctl
	p := c.player(e.Player)
	key := domain.LimitKey{Kind: e.Kind, Days: e.Period()}
	subject := fmt.Sprintf("%s %d-day %s limit", e.Player, key.Days, e.Kind)
	lim := p.limits[key]
	if p.anchored && c.known {
		raise := lim != nil && e.Limit > lim.at(at)
		switch {
		case raise && e.EffectiveAt.Before(at.Add(c.settings.RaiseDelay())):
			s.bad(seq, CodeLimitChangeInvalid, subject, fmt.Sprintf("a raise effective %d hours later", c.settings.LimitRaiseDelayHours), "effective "+e.EffectiveAt.Format(time.RFC3339Nano))
		case !raise && e.EffectiveAt.After(at):
			s.bad(seq, CodeLimitChangeInvalid, subject, "a first limit or a lowering effective at once", "effective "+e.EffectiveAt.Format(time.RFC3339Nano))
		case (lim == nil || raise) && !c.settings.Offers(key.Days):
			s.bad(seq, CodeLimitChangeInvalid, subject, fmt.Sprintf("a period the settings offer (%v days)", c.settings.LimitPeriodsDays), key.Days)
		}
	}
	switch {
	case lim == nil:
		p.limits[key] = &auditLimit{amount: e.Limit}
	case e.EffectiveAt.After(at):
		lim.amount = lim.at(at)
		lim.pending, lim.from, lim.hasPending = e.Limit, e.EffectiveAt, true
	default:
		lim.amount, lim.hasPending = e.Limit, false
	}
}

// term folds a self-exclusion term and checks it: within the settings'
// range, never shortening one in force.
func (s *state) term(seq uint64, at time.Time, e *domain.SelfExcludedUntil) {
	c := s.ctl
	p := c.player(e.Player)
	subject := "self-exclusion of " + e.Player
	if at.Before(p.until) && e.Until.Before(p.until) {
		s.bad(seq, CodeExclusionInvalid, subject, "a term extended, never shortened: until "+p.until.Format(time.RFC3339Nano)+" or later", e.Until.Format(time.RFC3339Nano))
	}
	if earliest, latest := c.settings.SelfExclusionRange(at); c.known && (e.Until.Before(earliest) || e.Until.After(latest)) {
		s.bad(seq, CodeExclusionInvalid, subject, "a term ending between "+earliest.Format(time.RFC3339)+" and "+latest.Format(time.RFC3339), e.Until.Format(time.RFC3339Nano))
	}
	s.needReason(seq, subject, e.By, e.Reason)
	if e.Until.After(p.until) {
		p.until = e.Until
	}
}

// governed checks a deposit or a stake against the player's exclusions,
// bans and limits in force at its time, then counts it.
func (s *state) governed(seq uint64, at time.Time, player string, kind domain.LimitKind, amount domain.Amount, required bool) {
	c := s.ctl
	p := c.player(player)
	sums := p.movements[kind]
	if sums == nil {
		sums = &runningSum{}
		p.movements[kind] = sums
	}
	defer sums.add(at, amount)
	if !p.anchored {
		return
	}
	subject := fmt.Sprintf("%s of %s by %s", kind, amount, player)
	switch {
	case p.forGood:
		s.bad(seq, CodeExclusionBreached, subject, "none: the player is self-excluded for good", "accepted")
	case at.Before(p.until):
		s.bad(seq, CodeExclusionBreached, subject, "none until "+p.until.Format(time.RFC3339Nano)+": the player is self-excluded", "accepted")
	default:
		for id, inForce := range p.bans {
			if inForce {
				s.bad(seq, CodeExclusionBreached, subject, "none: the player is under ban "+id, "accepted")
				break
			}
		}
	}
	set := false
	for key, lim := range p.limits {
		if key.Kind != kind {
			continue
		}
		set = true
		if used, max := sums.sum(at.Add(-time.Duration(key.Days)*24*time.Hour))+amount, lim.at(at); used > max {
			s.bad(seq, CodeLimitBreached, subject, fmt.Sprintf("at most %s over %d days", max, key.Days), fmt.Sprintf("%s over %d days", used, key.Days))
		}
	}
	if !set && required && c.known {
		s.bad(seq, CodeLimitBreached, subject, "a "+string(kind)+" limit set before it, as the settings require", "none")
	}
}
