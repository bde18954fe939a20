package api

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/fdj/tresor/domain"
	"github.com/fdj/tresor/projections"
	"github.com/fdj/tresor/settlement"
)

// accountRequest is PUT /v1/players/{player}'s body; a limit left out is
// left unchanged.
type accountRequest struct {
	WeeklyDepositLimit *string `json:"weekly_deposit_limit"`
	WeeklyStakeLimit   *string `json:"weekly_stake_limit"`
	// Limits sets limits of any period the settings offer.
	Limits []limitRequest `json:"limits"`
	// SelfExcluded true excludes the player for good; false asks to lift
	// an exclusion (refused while one is in force); absent leaves it as it
	// is. SelfExcludedUntil (RFC 3339) excludes the player until then.
	SelfExcluded      *bool   `json:"self_excluded"`
	SelfExcludedUntil *string `json:"self_excluded_until"`
	// Reason says why: required for an exclusion recorded by the
	// operator.
	Reason *string `json:"reason"`
}

// limitRequest is one limit of an accountRequest.
type limitRequest struct {
	Kind       domain.LimitKind `json:"kind"`
	PeriodDays int              `json:"period_days"`
	Amount     string           `json:"amount"`
}

// accountJSON is an account as the API shows it.
type accountJSON struct {
	Player             string        `json:"player"`
	Balance            domain.Amount `json:"balance"`
	Deposited          domain.Amount `json:"deposited"`
	Withdrawn          domain.Amount `json:"withdrawn"`
	Staked             domain.Amount `json:"staked"`
	Won                domain.Amount `json:"won"`
	Plays              int           `json:"plays"`
	SelfExcluded       bool          `json:"self_excluded"`
	WeeklyDepositLimit *limitJSON    `json:"weekly_deposit_limit"`
	WeeklyStakeLimit   *limitJSON    `json:"weekly_stake_limit"`
	OpenedAt           time.Time     `json:"opened_at"`
	Seq                uint64        `json:"seq"`
	// SelfExcludedUntil is the end of a self-exclusion term in force
	// (absent when none is).
	SelfExcludedUntil *time.Time `json:"self_excluded_until,omitempty"`
	// Limits lists every limit set, by kind and period (the weekly ones
	// too).
	Limits []periodLimitJSON `json:"limits"`
	// Bans are the bans in force.
	Bans []projections.Ban `json:"bans"`
	// ClosedAt is when the account was closed (absent while it is open).
	ClosedAt *time.Time `json:"closed_at,omitempty"`
	// AdjustedCredits and AdjustedDebits add up the approved adjustments,
	// so that the totals explain the balance.
	AdjustedCredits domain.Amount `json:"adjusted_credits"`
	AdjustedDebits  domain.Amount `json:"adjusted_debits"`
	// BalanceAfter is, in a deposit's or a withdrawal's answer, the balance
	// right after that movement: the same on every retry, whatever moved
	// the account since.
	BalanceAfter *domain.Amount `json:"balance_after,omitempty"`
}

// limitJSON is a weekly limit: in force now, and a raise waiting its 24 h.
type limitJSON struct {
	InForce     domain.Amount  `json:"in_force"`
	Pending     *domain.Amount `json:"pending,omitempty"`
	PendingFrom *time.Time     `json:"pending_from,omitempty"`
}

func limitView(l *projections.Limit, now time.Time) *limitJSON {
	if l == nil {
		return nil
	}
	v := &limitJSON{InForce: l.At(now)}
	if l.Pending != nil && now.Before(*l.PendingFrom) {
		v.Pending, v.PendingFrom = l.Pending, l.PendingFrom
	}
	return v
}

// periodLimitJSON is a limit of any period.
type periodLimitJSON struct {
	Kind       domain.LimitKind `json:"kind"`
	PeriodDays int              `json:"period_days"`
	limitJSON
}

func accountView(a projections.Account) accountJSON {
	now := time.Now()
	v := accountJSON{
		Player: a.Player, Balance: a.Balance, Deposited: a.Deposited, Withdrawn: a.Withdrawn, Staked: a.Staked, Won: a.Won,
		Plays: a.Plays, SelfExcluded: a.SelfExcluded, OpenedAt: a.OpenedAt, Seq: a.LastSeq,
		WeeklyDepositLimit: limitView(a.DepositLimit, now), WeeklyStakeLimit: limitView(a.StakeLimit, now),
		Limits: []periodLimitJSON{}, Bans: a.Bans, ClosedAt: a.ClosedAt,
		AdjustedCredits: a.AdjustedCredits, AdjustedDebits: a.AdjustedDebits,
	}
	if v.Bans == nil {
		v.Bans = []projections.Ban{}
	}
	if a.SelfExcludedUntil != nil && now.Before(*a.SelfExcludedUntil) {
		v.SelfExcludedUntil = a.SelfExcludedUntil
	}
	for _, l := range a.Limits {
		v.Limits = append(v.Limits, periodLimitJSON{Kind: l.Kind, PeriodDays: l.PeriodDays, limitJSON: *limitView(&l.Limit, now)})
	}
	return v
}

// readAccount waits for seq and reads the account.
func (s *Server) readAccount(r *http.Request, p string, seq uint64) (int, any, error) {
	v, err := s.accountAt(r, p, seq)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, v, nil
}

func (s *Server) accountAt(r *http.Request, p string, seq uint64) (accountJSON, error) {
	if err := s.waitFor(r.Context(), seq); err != nil {
		return accountJSON{}, err
	}
	a, err := s.cfg.Store.Account(r.Context(), p)
	if err != nil {
		return accountJSON{}, fmt.Errorf("account %s: %w", p, err)
	}
	return accountView(a), nil
}

func (s *Server) configure(r *http.Request, c *Claims) (int, any, error) {
	p, err := player(r)
	if err != nil {
		return 0, nil, err
	}
	var req accountRequest
	if err := decode(r, &req); err != nil {
		return 0, nil, err
	}
	by, err := s.actor(r, c)
	if err != nil {
		return 0, nil, err
	}
	cmd := domain.ConfigureAccount{Player: p, By: by}
	if req.Reason != nil {
		cmd.Reason = *req.Reason
	}
	if req.SelfExcluded != nil {
		cmd.SelfExcluded, cmd.LiftSelfExclusion = *req.SelfExcluded, !*req.SelfExcluded
	}
	if req.SelfExcludedUntil != nil {
		until, err := time.Parse(time.RFC3339Nano, *req.SelfExcludedUntil)
		if err != nil {
			return 0, nil, invalidf("self_excluded_until %.64q: want an RFC 3339 time", *req.SelfExcludedUntil)
		}
		cmd.SelfExcludedUntil = &until
	}
	if len(req.Limits) > domain.LimitSettingsMax {
		return 0, nil, invalidf("limits: %d given, at most %d", len(req.Limits), domain.LimitSettingsMax)
	}
	for i, l := range req.Limits {
		a, err := amount(fmt.Sprintf("limits[%d].amount", i), l.Amount)
		if err != nil {
			return 0, nil, err
		}
		cmd.Limits = append(cmd.Limits, domain.LimitSetting{Kind: l.Kind, PeriodDays: l.PeriodDays, Amount: a})
	}
	for _, l := range []struct {
		name string
		in   *string
		out  **domain.Amount
	}{{"weekly_deposit_limit", req.WeeklyDepositLimit, &cmd.DepositLimit}, {"weekly_stake_limit", req.WeeklyStakeLimit, &cmd.StakeLimit}} {
		if l.in == nil {
			continue
		}
		a, err := amount(l.name, *l.in)
		if err != nil {
			return 0, nil, err
		}
		*l.out = &a
	}
	res, err := s.execute(r.Context(), cmd)
	if err != nil {
		return 0, nil, err
	}
	return s.readAccount(r, p, res.LastSeq())
}

// moneyRequest is a deposit's or a withdrawal's body.
type moneyRequest struct {
	Amount string `json:"amount"`
}

// money runs a deposit or a withdrawal built by mk.
func (s *Server) money(r *http.Request, c *Claims, mk func(player string, a domain.Amount, key string, by *domain.Actor) domain.Command) (int, any, error) {
	p, err := player(r)
	if err != nil {
		return 0, nil, err
	}
	by, err := s.actor(r, c)
	if err != nil {
		return 0, nil, err
	}
	key, err := idempotencyKey(r)
	if err != nil {
		return 0, nil, err
	}
	var req moneyRequest
	if err := decode(r, &req); err != nil {
		return 0, nil, err
	}
	a, err := amount("amount", req.Amount)
	if err != nil {
		return 0, nil, err
	}
	res, err := s.execute(r.Context(), mk(p, a, key, by))
	if err != nil {
		return 0, nil, err
	}
	v, err := s.accountAt(r, p, res.LastSeq())
	if err != nil {
		return 0, nil, err
	}
	after := balanceAfter(res)
	v.BalanceAfter = &after
	return http.StatusOK, v, nil
}

// balanceAfter is the balance a deposit or a withdrawal left, from its
// event or, for a retry, from the first result.
func balanceAfter(res settlement.Result) domain.Amount {
	if res.Replay != nil {
		return res.Replay.Balance
	}
	for _, e := range res.Events {
		switch e := e.(type) {
		case *domain.FundsDeposited:
			return e.Balance
		case *domain.FundsWithdrawn:
			return e.Balance
		}
	}
	return 0
}

func (s *Server) deposit(r *http.Request, c *Claims) (int, any, error) {
	return s.money(r, c, func(p string, a domain.Amount, k string, by *domain.Actor) domain.Command {
		return domain.Deposit{Player: p, Amount: a, Key: k, By: by}
	})
}

func (s *Server) withdraw(r *http.Request, c *Claims) (int, any, error) {
	return s.money(r, c, func(p string, a domain.Amount, k string, by *domain.Actor) domain.Command {
		return domain.Withdraw{Player: p, Amount: a, Key: k, By: by}
	})
}

func (s *Server) account(r *http.Request, _ *Claims) (int, any, error) {
	p, err := player(r)
	if err != nil {
		return 0, nil, err
	}
	seq, err := s.minSeq(r)
	if err != nil {
		return 0, nil, err
	}
	if at := r.URL.Query().Get("at"); at != "" {
		return s.balanceAt(r, p, at, seq)
	}
	return s.readAccount(r, p, seq)
}

// minSeq reads the optional read-your-writes position: the min_seq query
// parameter or the Tresor-Min-Seq header. A position beyond the stream's
// head is refused at once: no wait would reach it.
func (s *Server) minSeq(r *http.Request) (uint64, error) {
	v := r.URL.Query().Get("min_seq")
	if v == "" {
		v = r.Header.Get("Tresor-Min-Seq")
	}
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil || n == 0 {
		return 0, invalidf("min_seq %.32q: want a positive stream sequence", v)
	}
	if n <= s.cfg.Writer.LastSeq() {
		return n, nil
	}
	// A head that cannot be read refuses nothing: the bounded wait then
	// decides, as it would without this check.
	if head, err := s.head(r.Context()); err == nil && n > head {
		return 0, invalidf("min_seq %d: the stream ends at %d", n, head)
	}
	return n, nil
}

// head is the stream's last sequence as far as this server can tell: the
// writer's last event, or past it the seals the committer appends, which
// the projections and the stream itself show. It is read only for a
// min_seq past the writer's, so the normal path costs no round trip.
func (s *Server) head(ctx context.Context) (uint64, error) {
	head := s.cfg.Writer.LastSeq()
	cp, err := s.cfg.Store.Checkpoint(ctx)
	if err != nil {
		return 0, fmt.Errorf("stream head: %w", err)
	}
	head = max(head, cp)
	if s.cfg.Runner != nil {
		lag, err := s.cfg.Runner.Lag(ctx)
		if err != nil {
			return 0, fmt.Errorf("stream head: %w", err)
		}
		head = max(head, lag.Head)
	}
	return head, nil
}

// playRequest is POST plays' body.
type playRequest struct {
	Stake string `json:"stake"`
}

// playViews renders plays with their blocks' commitments, reading each
// block once (a history page holds plays of a few blocks at most).
func (s *Server) playViews(ctx context.Context, plays []projections.Play) ([]projections.PlayView, error) {
	blocks := map[string]*projections.BlockReport{}
	out := make([]projections.PlayView, 0, len(plays))
	for _, p := range plays {
		b := blocks[p.Block]
		if b == nil {
			r, err := s.cfg.Store.Block(ctx, p.Block)
			if err != nil {
				return nil, fmt.Errorf("block %s of play %s: %w", p.Block, p.ID, err)
			}
			b = &r
			blocks[p.Block] = b
		}
		out = append(out, p.View(*b))
	}
	return out, nil
}

// onePlay answers with one play.
func (s *Server) onePlay(ctx context.Context, status int, p projections.Play) (int, any, error) {
	v, err := s.playViews(ctx, []projections.Play{p})
	if err != nil {
		return 0, nil, err
	}
	return status, v[0], nil
}

// findPlay reads a play of a player by id; another player's play is
// not_found too, so that an answer never tells whether it exists.
func (s *Server) findPlay(r *http.Request, player, id string) (projections.Play, error) {
	p, err := s.cfg.Store.Play(r.Context(), player, id)
	if errors.Is(err, projections.ErrNotFound) {
		return projections.Play{}, &domain.Error{Code: domain.CodeNotFound, Message: "no such play"}
	}
	return p, err
}

func (s *Server) play(r *http.Request, _ *Claims) (int, any, error) {
	p, err := player(r)
	if err != nil {
		return 0, nil, err
	}
	key, err := idempotencyKey(r)
	if err != nil {
		return 0, nil, err
	}
	var req playRequest
	if err := decode(r, &req); err != nil {
		return 0, nil, err
	}
	stake, err := amount("stake", req.Stake)
	if err != nil {
		return 0, nil, err
	}
	res, err := s.execute(r.Context(), domain.PlaceStake{Player: p, Stake: stake, Key: key})
	if err != nil {
		return 0, nil, err
	}
	id, status := "", http.StatusCreated
	if res.Replay != nil {
		id, status = res.Replay.Play, http.StatusOK
	}
	for _, e := range res.Events {
		if sp, ok := e.(*domain.StakePlaced); ok {
			id = sp.Play
		}
	}
	if err := s.waitFor(r.Context(), res.LastSeq()); err != nil {
		return 0, nil, err
	}
	pl, err := s.findPlay(r, p, id)
	if err != nil {
		return 0, nil, err
	}
	return s.onePlay(r.Context(), status, pl)
}

// throwJSON is one throw's answer.
type throwJSON struct {
	PlayID     string                 `json:"play_id"`
	Throw      int                    `json:"throw"`
	Direction  domain.Direction       `json:"direction"`
	Steps      int                    `json:"steps"`
	Pawn       domain.Cell            `json:"pawn"`
	Chest      *chestJSON             `json:"chest"`
	ThrowsLeft int                    `json:"throws_left"`
	Status     projections.PlayStatus `json:"status"`
	Tier       *domain.Tier           `json:"tier,omitempty"`
	Prize      *domain.Amount         `json:"prize,omitempty"`
	Seq        uint64                 `json:"seq"`
}

// chestJSON is the chest a throw opened.
type chestJSON struct {
	Index  int           `json:"index"`
	Cell   domain.Cell   `json:"cell"`
	Symbol domain.Symbol `json:"symbol"`
}

// throwRequest is POST throws' body: the throw it makes, 1 to 4. A body
// without it (or no body) makes the next throw, as before the field
// existed; such a request is not safe to retry.
type throwRequest struct {
	Throw *int `json:"throw"`
}

func (s *Server) throw(r *http.Request, _ *Claims) (int, any, error) {
	p, err := player(r)
	if err != nil {
		return 0, nil, err
	}
	id, err := playID(r)
	if err != nil {
		return 0, nil, err
	}
	var req throwRequest
	if err := decodeOptional(r, &req); err != nil {
		return 0, nil, err
	}
	n := 0
	if req.Throw != nil {
		if n = *req.Throw; n < 1 || n > domain.ThrowCount {
			return 0, nil, invalidf("throw %d: want 1 to %d", n, domain.ThrowCount)
		}
	}
	res, err := s.execute(r.Context(), domain.MakeThrow{Player: p, Play: id, Throw: n})
	switch {
	case err == nil && res.Replay != nil:
		return s.madeThrow(r, p, id, n, res.LastSeq())
	case n > 0 && errors.Is(err, domain.ErrNotFound):
		// The writer forgets a play's owner once its block closes; the
		// history still tells whether throw n was made.
		if status, body, herr := s.madeThrow(r, p, id, n, 0); herr == nil {
			return status, body, nil
		}
		return 0, nil, err
	case err != nil:
		return 0, nil, err
	}
	out := throwJSON{PlayID: id, Status: projections.StatusInProgress, Seq: res.LastSeq()}
	for _, e := range res.Events {
		switch e := e.(type) {
		case *domain.ThrowMade:
			out.setThrow(e.Throw, e.Result)
		case *domain.PlaySettled:
			out.settle(projections.StatusSettled, e.Tier, e.Prize)
		}
	}
	return http.StatusOK, out, nil
}

// madeThrow answers the retry of a throw already made with that throw, as
// the history records it: the same answer as the first time, but for seq,
// which is then a position at which the whole play is visible. seq is the
// position the writer's answer was decided at (0 when there is none: the
// writer's last known), never the node's position read now: the node may
// have stepped down meanwhile, its position behind the throw.
func (s *Server) madeThrow(r *http.Request, player, id string, n int, seq uint64) (int, any, error) {
	if seq == 0 {
		seq = s.cfg.Writer.LastSeq()
	}
	if err := s.waitFor(r.Context(), seq); err != nil {
		return 0, nil, err
	}
	pl, err := s.findPlay(r, player, id)
	if err != nil {
		return 0, nil, err
	}
	if n < 1 || n > len(pl.Throws) {
		return 0, nil, &domain.Error{Code: domain.CodeInternal, Message: fmt.Sprintf("play %s: throw %d is recorded but not in the history", id, n)}
	}
	out := throwJSON{PlayID: id, Status: projections.StatusInProgress, Seq: seq}
	out.setThrow(n, pl.Throws[n-1].Result)
	if n == domain.ThrowCount && pl.Tier != nil && pl.Prize != nil {
		out.settle(pl.Status, *pl.Tier, *pl.Prize)
	}
	return http.StatusOK, out, nil
}

// setThrow fills in throw n's result.
func (o *throwJSON) setThrow(n int, t domain.ThrowResult) {
	o.Throw, o.Direction, o.Steps, o.Pawn, o.ThrowsLeft = n, t.Direction, t.Steps, t.Pawn, domain.ThrowCount-n
	if t.Chest >= 0 {
		o.Chest = &chestJSON{Index: t.Chest, Cell: t.Pawn, Symbol: t.Symbol}
	}
}

// settle marks the answer of a play's last throw with its settlement.
func (o *throwJSON) settle(status projections.PlayStatus, tier domain.Tier, prize domain.Amount) {
	o.Status, o.Tier, o.Prize = status, &tier, &prize
}

// noBody is the body of a request that takes none, or {}: decoding into
// it refuses any field, so that an approval sent with a body it does not
// take ({"approve": false}) is not taken for an approval.
type noBody struct{}

// decodeOptional accepts an empty body, or one JSON object decoded into v.
func decodeOptional(r *http.Request, v any) error {
	if r.ContentLength == 0 {
		return nil
	}
	return decode(r, v)
}

// historyJSON is a page of history.
type historyJSON struct {
	Plays []projections.PlayView `json:"plays"`
	Next  string                 `json:"next,omitempty"`
}

func (s *Server) history(r *http.Request, _ *Claims) (int, any, error) {
	p, err := player(r)
	if err != nil {
		return 0, nil, err
	}
	q := r.URL.Query()
	limit := 0
	if v := q.Get("limit"); v != "" {
		if limit, err = strconv.Atoi(v); err != nil || limit < 1 || limit > projections.PageMax {
			return 0, nil, invalidf("limit %q: want 1 to %d", v, projections.PageMax)
		}
	}
	before := q.Get("before")
	if before != "" && !validCursor(before) {
		return 0, nil, invalidf("before %q is not a cursor of this API", before)
	}
	if err := s.waitMin(r); err != nil {
		return 0, nil, err
	}
	page, err := s.cfg.Store.History(r.Context(), p, before, limit)
	if err != nil {
		return 0, nil, fmt.Errorf("history of %s: %w", p, err)
	}
	plays, err := s.playViews(r.Context(), page.Plays)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, historyJSON{Plays: plays, Next: page.Next}, nil
}

// validCursor bounds a history cursor to plain printable ASCII.
func validCursor(c string) bool {
	if len(c) > 64 {
		return false
	}
	for _, b := range []byte(c) {
		if b <= ' ' || b > '~' {
			return false
		}
	}
	return true
}

// waitMin waits for the optional min_seq before a read.
func (s *Server) waitMin(r *http.Request) error {
	seq, err := s.minSeq(r)
	if err != nil || seq == 0 {
		return err
	}
	return s.waitFor(r.Context(), seq)
}

func (s *Server) lastPlay(r *http.Request, _ *Claims) (int, any, error) {
	p, err := player(r)
	if err != nil {
		return 0, nil, err
	}
	if err := s.waitMin(r); err != nil {
		return 0, nil, err
	}
	pl, err := s.cfg.Store.LastPlay(r.Context(), p)
	if err != nil {
		return 0, nil, fmt.Errorf("last play of %s: %w", p, err)
	}
	return s.onePlay(r.Context(), http.StatusOK, pl)
}

func (s *Server) getPlay(r *http.Request, _ *Claims) (int, any, error) {
	p, err := player(r)
	if err != nil {
		return 0, nil, err
	}
	id, err := playID(r)
	if err != nil {
		return 0, nil, err
	}
	if err := s.waitMin(r); err != nil {
		return 0, nil, err
	}
	pl, err := s.findPlay(r, p, id)
	if err != nil {
		return 0, nil, err
	}
	return s.onePlay(r.Context(), http.StatusOK, pl)
}

// blocksJSON is a page of block reports.
type blocksJSON struct {
	Blocks []projections.BlockReport `json:"blocks"`
	Next   string                    `json:"next,omitempty"`
}

func (s *Server) blocks(r *http.Request, _ *Claims) (int, any, error) {
	q := r.URL.Query()
	limit := projections.PageDefault
	if v := q.Get("limit"); v != "" {
		var err error
		if limit, err = strconv.Atoi(v); err != nil || limit < 1 || limit > projections.PageMax {
			return 0, nil, invalidf("limit %q: want 1 to %d", v, projections.PageMax)
		}
	}
	after := q.Get("after")
	if after != "" && !domain.ValidID(after) {
		return 0, nil, invalidf("after %q is not a block id", after)
	}
	if err := s.waitMin(r); err != nil {
		return 0, nil, err
	}
	bs, err := s.cfg.Store.Blocks(r.Context(), after, limit)
	if err != nil {
		return 0, nil, fmt.Errorf("blocks: %w", err)
	}
	out := blocksJSON{Blocks: bs}
	if len(bs) == limit {
		out.Next = bs[len(bs)-1].ID
	}
	return http.StatusOK, out, nil
}

func (s *Server) block(r *http.Request, _ *Claims) (int, any, error) {
	id := r.PathValue("block")
	if !domain.ValidID(id) {
		return 0, nil, invalidf("block id %q is not valid", id)
	}
	if err := s.waitMin(r); err != nil {
		return 0, nil, err
	}
	b, err := s.cfg.Store.Block(r.Context(), id)
	if err != nil {
		return 0, nil, fmt.Errorf("block %s: %w", id, err)
	}
	return http.StatusOK, b, nil
}

// emissionRequest is POST /v1/emissions' body.
type emissionRequest struct {
	Price  string `json:"price"`
	Blocks int    `json:"blocks"`
}

// emissionJSON is the emission created and its first block.
type emissionJSON struct {
	EmissionID string        `json:"emission_id"`
	Price      domain.Amount `json:"price"`
	Blocks     int           `json:"blocks"`
	BlockIDs   []string      `json:"opened_blocks"`
	Seq        uint64        `json:"seq"`
}

func (s *Server) emission(r *http.Request, c *Claims) (int, any, error) {
	var req emissionRequest
	if err := decode(r, &req); err != nil {
		return 0, nil, err
	}
	by, err := s.actor(r, c)
	if err != nil {
		return 0, nil, err
	}
	price, err := amount("price", req.Price)
	if err != nil {
		return 0, nil, err
	}
	if req.Blocks < 1 || req.Blocks > emissionBlocksMax {
		return 0, nil, invalidf("blocks %d: want 1 to %d", req.Blocks, emissionBlocksMax)
	}
	// The key is optional for one release (docs/api.md): without it a
	// retry creates another emission.
	key := ""
	if len(r.Header.Values("Idempotency-Key")) > 0 {
		if key, err = idempotencyKey(r); err != nil {
			return 0, nil, err
		}
	}
	res, err := s.execute(r.Context(), domain.CreateEmission{Price: price, Blocks: req.Blocks, Key: key, By: by})
	if err != nil {
		return 0, nil, err
	}
	out := emissionJSON{Price: price, Blocks: req.Blocks, BlockIDs: []string{}, Seq: res.LastSeq()}
	status := http.StatusCreated
	if rp := res.Replay; rp != nil {
		status, out.EmissionID = http.StatusOK, rp.Emission
		if rp.OpenedBlock != "" {
			out.BlockIDs = append(out.BlockIDs, rp.OpenedBlock)
		}
	}
	for _, e := range res.Events {
		switch e := e.(type) {
		case *domain.EmissionCreated:
			out.EmissionID = e.Emission
		case *domain.BlockOpened:
			out.BlockIDs = append(out.BlockIDs, e.Block)
		}
	}
	if err := s.waitFor(r.Context(), out.Seq); err != nil {
		return 0, nil, err
	}
	return status, out, nil
}

// closeRequest is POST /v1/blocks/{block}/close's optional body: why, which
// closing a block early (before it sold out) requires.
type closeRequest struct {
	Reason string `json:"reason"`
}

func (s *Server) closeBlock(r *http.Request, c *Claims) (int, any, error) {
	id := r.PathValue("block")
	if !domain.ValidID(id) {
		return 0, nil, invalidf("block id %q is not valid", id)
	}
	var req closeRequest
	if err := decodeOptional(r, &req); err != nil {
		return 0, nil, err
	}
	by, err := s.actor(r, c)
	if err != nil {
		return 0, nil, err
	}
	res, err := s.execute(r.Context(), domain.CloseBlock{Block: id, By: by, Reason: req.Reason})
	if err != nil {
		return 0, nil, err
	}
	if err := s.waitFor(r.Context(), res.LastSeq()); err != nil {
		return 0, nil, err
	}
	b, err := s.cfg.Store.Block(r.Context(), id)
	if err != nil {
		return 0, nil, fmt.Errorf("block %s: %w", id, err)
	}
	return http.StatusOK, b, nil
}

// reconciliationJSON is finance's reconciliation rows.
type reconciliationJSON struct {
	Rows []projections.Reconciliation `json:"rows"`
	// Adjustments are the approved adjustments per day and kind (of the
	// days from and to keep): they move players' money against house
	// accounts, never a block's, so no row's difference includes them.
	Adjustments []projections.AdjustmentDay `json:"adjustments"`
}

// reconciliation answers per emission, per block or per day (scope; day
// when only from or to is given, emission otherwise). emission=ID keeps one
// emission's rows: its own (scope=emission), its blocks' (scope=block) or
// the days of its blocks' activity (scope=day; without emission= a day row
// adds up every emission's). from and to (YYYY-MM-DD, UTC days, inclusive)
// filter day rows only, and are refused with another scope.
func (s *Server) reconciliation(r *http.Request, _ *Claims) (int, any, error) {
	q := r.URL.Query()
	emission, from, to := q.Get("emission"), q.Get("from"), q.Get("to")
	scope := projections.Scope(q.Get("scope"))
	switch {
	case scope == "" && (from != "" || to != ""):
		scope = projections.ScopeDay
	case scope == "":
		scope = projections.ScopeEmission
	case !projections.ValidScope(scope):
		return 0, nil, invalidf("scope %.32q: want block, emission or day", scope)
	}
	switch {
	case emission != "" && !domain.ValidID(emission):
		return 0, nil, invalidf("emission %.80q is not valid", emission)
	case (from != "" || to != "") && scope != projections.ScopeDay:
		return 0, nil, invalidf("from and to filter day rows: ask scope=day, not scope=%s", scope)
	}
	for _, d := range []string{from, to} {
		if _, err := time.Parse(time.DateOnly, d); d != "" && err != nil {
			return 0, nil, invalidf("date %.32q: want YYYY-MM-DD", d)
		}
	}
	if err := s.waitMin(r); err != nil {
		return 0, nil, err
	}
	rows, err := s.cfg.Store.Reconciliation(r.Context(), scope, emission)
	if err != nil {
		return 0, nil, fmt.Errorf("reconciliation: %w", err)
	}
	// from and to are empty unless scope=day: day keys sort as dates.
	kept := rows[:0]
	for _, row := range rows {
		if (from == "" || row.Key >= from) && (to == "" || row.Key <= to) {
			kept = append(kept, row)
		}
	}
	if strings.Contains(r.Header.Get("Accept"), "text/csv") {
		var buf bytes.Buffer
		if err := projections.WriteReconciliationCSV(&buf, kept); err != nil {
			return 0, nil, fmt.Errorf("reconciliation CSV: %w", err)
		}
		return http.StatusOK, csvBody(buf.String()), nil
	}
	d, err := s.cfg.Store.ReportData(r.Context())
	if err != nil {
		return 0, nil, fmt.Errorf("reconciliation's adjustments: %w", err)
	}
	out := reconciliationJSON{Rows: kept, Adjustments: []projections.AdjustmentDay{}}
	for _, a := range d.AdjustmentDays {
		if (from == "" || a.Day >= from) && (to == "" || a.Day <= to) {
			out.Adjustments = append(out.Adjustments, a)
		}
	}
	return http.StatusOK, out, nil
}
