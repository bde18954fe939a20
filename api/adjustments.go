package api

import (
	"fmt"
	"net/http"
	"time"

	"github.com/fdj/tresor/domain"
	"github.com/fdj/tresor/projections"
)

// proposeRequest is the body of POST /v1/players/{player}/adjustments.
type proposeRequest struct {
	Direction string `json:"direction"`
	Kind      string `json:"kind"`
	Amount    string `json:"amount"`
	Reference string `json:"reference"`
	Reason    string `json:"reason"`
}

// adjustmentJSON is an adjustment as the API answers it: the read model's
// row, and its state at the time of the answer (expired for a pending one
// past its expiry).
type adjustmentJSON struct {
	projections.Adjustment
	State string `json:"state"`
}

// adjustmentsJSON lists adjustments.
type adjustmentsJSON struct {
	Adjustments []adjustmentJSON `json:"adjustments"`
}

func answerAdjustment(x projections.Adjustment, now time.Time) adjustmentJSON {
	return adjustmentJSON{Adjustment: x, State: x.StateAt(now)}
}

// proposeAdjustment records a proposed adjustment and answers it, pending
// (202: nothing moved until another subject approves it), or answers the
// same proposal pending already (a retry).
func (s *Server) proposeAdjustment(r *http.Request, c *Claims) (int, any, error) {
	p, err := player(r)
	if err != nil {
		return 0, nil, err
	}
	var req proposeRequest
	if err := decode(r, &req); err != nil {
		return 0, nil, err
	}
	a, err := amount("amount", req.Amount)
	if err != nil {
		return 0, nil, err
	}
	by, err := s.actor(r, c)
	if err != nil {
		return 0, nil, err
	}
	cmd := domain.ProposeAdjustment{Player: p, Direction: domain.AdjustmentDirection(req.Direction), Kind: domain.AdjustmentKind(req.Kind),
		Amount: a, Reference: req.Reference, Reason: req.Reason, By: by}
	return s.adjustmentCommand(r, cmd, "", http.StatusAccepted)
}

// approveAdjustment approves an adjustment and answers it, approved: the
// money moved, by this approval or by the first one.
func (s *Server) approveAdjustment(r *http.Request, c *Claims) (int, any, error) {
	id, err := adjustmentID(r)
	if err != nil {
		return 0, nil, err
	}
	if err := decodeOptional(r, &noBody{}); err != nil {
		return 0, nil, err
	}
	by, err := s.actor(r, c)
	if err != nil {
		return 0, nil, err
	}
	return s.adjustmentCommand(r, domain.ApproveAdjustment{Adjustment: id, By: by}, id, http.StatusOK)
}

// rejectAdjustment rejects an adjustment, with a reason, and answers it.
func (s *Server) rejectAdjustment(r *http.Request, c *Claims) (int, any, error) {
	id, err := adjustmentID(r)
	if err != nil {
		return 0, nil, err
	}
	reason, by, err := s.reasonAndActor(r, c)
	if err != nil {
		return 0, nil, err
	}
	return s.adjustmentCommand(r, domain.RejectAdjustment{Adjustment: id, Reason: reason, By: by}, id, http.StatusOK)
}

// adjustmentCommand runs a proposal or a decision and answers the
// adjustment (id, or the one the command recorded or answered), as the
// read models show it once they hold the command.
func (s *Server) adjustmentCommand(r *http.Request, cmd domain.Command, id string, status int) (int, any, error) {
	res, err := s.execute(r.Context(), cmd)
	if err != nil {
		return 0, nil, err
	}
	if res.Replay != nil {
		id = res.Replay.Adjustment
	}
	for _, e := range res.Events {
		if x, ok := e.(*domain.AdjustmentProposed); ok {
			id = x.Adjustment
		}
	}
	if err := s.waitFor(r.Context(), res.LastSeq()); err != nil {
		return 0, nil, err
	}
	x, err := s.findAdjustment(r, id)
	if err != nil {
		return 0, nil, err
	}
	return status, x, nil
}

// findAdjustment reads one adjustment.
func (s *Server) findAdjustment(r *http.Request, id string) (adjustmentJSON, error) {
	xs, err := s.cfg.Store.Adjustments(r.Context(), projections.AdjustmentQuery{ID: id})
	return oneProposal(xs, err, "adjustment", id, answerAdjustment)
}

// adjustmentID returns the path's adjustment id, checked.
func adjustmentID(r *http.Request) (string, error) {
	return proposalID(r, "adjustment", "A", domain.AdjustmentNumber)
}

// getAdjustment answers one adjustment.
func (s *Server) getAdjustment(r *http.Request, _ *Claims) (int, any, error) {
	return getProposal(s, r, adjustmentID, s.findAdjustment)
}

// proposalID returns the path's id of a proposal (an adjustment, an
// erasure), checked: its prefix and a number (number reads it) that an
// int64 holds, at most 18 digits.
func proposalID(r *http.Request, what, prefix string, number func(string) int) (string, error) {
	id := r.PathValue(what)
	if number(id) == 0 || len(id) > len(prefix)+18 {
		return "", invalidf("%s id %.80q is not valid: want %s and a number", what, id, prefix)
	}
	return id, nil
}

// oneProposal answers the proposal a query by its id read (rows, err), as
// answer makes it, or not_found.
func oneProposal[R, J any](rows []R, err error, what, id string, answer func(R, time.Time) J) (J, error) {
	var none J
	if err != nil {
		return none, fmt.Errorf("%s %s: %w", what, id, err)
	}
	if len(rows) == 0 {
		return none, &domain.Error{Code: domain.CodeNotFound, Message: fmt.Sprintf("no %s %s", what, id)}
	}
	return answer(rows[0], time.Now()), nil
}

// getProposal answers the proposal the path names (id reads it), read by
// find once the read models reach the request's min_seq.
func getProposal[J any](s *Server, r *http.Request, id func(*http.Request) (string, error), find func(*http.Request, string) (J, error)) (int, any, error) {
	pid, err := id(r)
	if err != nil {
		return 0, nil, err
	}
	if err := s.waitMin(r); err != nil {
		return 0, nil, err
	}
	x, err := find(r, pid)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, x, nil
}

// adjustments lists the newest adjustments, oldest first: every one, a
// player's (?player=), those pending (?state=pending), or those pending
// that the caller may approve (?state=pending&awaiting=me: proposed by
// someone else, not expired).
func (s *Server) adjustments(r *http.Request, c *Claims) (int, any, error) {
	var aq projections.AdjustmentQuery
	if p := r.URL.Query().Get("player"); p != "" {
		if !domain.ValidID(p) {
			return 0, nil, invalidf("player id %.80q is not valid", p)
		}
		aq.Player = p
	}
	pending, awaiting, err := pendingQuery(r)
	if err != nil {
		return 0, nil, err
	}
	aq.Pending = pending
	if err := s.waitMin(r); err != nil {
		return 0, nil, err
	}
	xs, err := s.cfg.Store.Adjustments(r.Context(), aq)
	if err != nil {
		return 0, nil, fmt.Errorf("adjustments: %w", err)
	}
	now := time.Now()
	out := adjustmentsJSON{Adjustments: []adjustmentJSON{}}
	me := s.storedSubject(c)
	for _, x := range xs {
		a := answerAdjustment(x, now)
		if awaiting && !awaits(c, me, a.State, x.ProposedBy) {
			continue
		}
		out.Adjustments = append(out.Adjustments, a)
	}
	return http.StatusOK, out, nil
}

// pendingQuery reads a listing of proposals' query: state=pending (only
// the pending ones), and awaiting=me with it (only those the caller may
// decide).
func pendingQuery(r *http.Request) (pending, awaiting bool, err error) {
	q := r.URL.Query()
	switch q.Get("state") {
	case "":
	case string(domain.AdjustmentStatePending):
		pending = true
	default:
		return false, false, invalidf("state %.40q: want pending, or none for every one", q.Get("state"))
	}
	switch a := q.Get("awaiting"); {
	case a == "":
	case a != "me" || !pending:
		return false, false, invalidf("awaiting %.40q: want me, with state=pending", a)
	default:
		awaiting = true
	}
	return pending, awaiting, nil
}

// awaits reports whether a proposal in state (at the answer's time) awaits
// the caller's decision: pending, not expired, and proposed by someone
// else. The read models hold the proposer's subject as the stream does:
// sealed (me, the caller's subject sealed), the same subject always to
// the same bytes.
func awaits(c *Claims, me, state string, proposer *domain.Actor) bool {
	return state == string(domain.AdjustmentStatePending) && proposer != nil && proposer.Subject != c.Subject && proposer.Subject != me
}
