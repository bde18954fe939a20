package api

import (
	"fmt"
	"net/http"
	"time"

	"github.com/fdj/tresor/domain"
	"github.com/fdj/tresor/projections"
	"github.com/fdj/tresor/settlement"
)

// erasureRequest is the body of POST /v1/erasures: a player or a staff
// subject, and the legal ground of an erasure before the retention ends.
type erasureRequest struct {
	Player      string `json:"player"`
	Subject     string `json:"subject"`
	LegalGround string `json:"legal_ground"`
}

// erasureJSON is an erasure as the API answers it: the read model's row,
// and its state at the time of the answer (expired for a pending one past
// its expiry).
type erasureJSON struct {
	projections.Erasure
	State string `json:"state"`
}

// erasuresJSON lists erasures.
type erasuresJSON struct {
	Erasures []erasureJSON `json:"erasures"`
}

// proposedJSON answers a proposal: the erasure, and whether this request
// recorded it (false for a retry, which answers the one pending).
type proposedJSON struct {
	erasureJSON
	Recorded bool `json:"recorded"`
}

// erasedJSON answers the proposal to erase a player erased already:
// nothing recorded, and the stream position it was decided at.
type erasedJSON struct {
	Player   string `json:"player"`
	Recorded bool   `json:"recorded"`
	Seq      uint64 `json:"seq"`
}

func answerErasure(x projections.Erasure, now time.Time) erasureJSON {
	return erasureJSON{Erasure: x, State: x.StateAt(now)}
}

// erase proposes the erasure of a person's personal data (POST
// /v1/erasures) and answers it, pending (202: nothing is erased until
// another subject approves it), or the same proposal pending already (a
// retry).
func (s *Server) erase(r *http.Request, c *Claims) (int, any, error) {
	var req erasureRequest
	if err := decode(r, &req); err != nil {
		return 0, nil, err
	}
	if (req.Player == "") == (req.Subject == "") {
		return 0, nil, invalidf("an erasure names a player or a subject: give one of them")
	}
	by, err := s.actor(r, c)
	if err != nil {
		return 0, nil, err
	}
	res, err := s.execute(r.Context(), domain.ErasePersonalData{Player: req.Player, Subject: req.Subject, LegalGround: req.LegalGround, By: by})
	if err != nil {
		return 0, nil, err
	}
	if len(res.Events) == 0 && res.Replay == nil {
		return http.StatusOK, erasedJSON{Player: req.Player, Seq: res.LastSeq()}, nil
	}
	x, err := s.erasureAnswer(r, res, "")
	if err != nil {
		return 0, nil, err
	}
	return http.StatusAccepted, proposedJSON{erasureJSON: x, Recorded: len(res.Events) > 0}, nil
}

// approveErasure approves an erasure and answers it, approved: recorded,
// by this approval or by the first one, and the data key destroyed.
func (s *Server) approveErasure(r *http.Request, c *Claims) (int, any, error) {
	id, err := erasureID(r)
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
	return s.erasureCommand(r, domain.ApproveErasure{Erasure: id, By: by}, id)
}

// rejectErasure rejects an erasure, with a reason, and answers it.
func (s *Server) rejectErasure(r *http.Request, c *Claims) (int, any, error) {
	id, err := erasureID(r)
	if err != nil {
		return 0, nil, err
	}
	reason, by, err := s.reasonAndActor(r, c)
	if err != nil {
		return 0, nil, err
	}
	return s.erasureCommand(r, domain.RejectErasure{Erasure: id, Reason: reason, By: by}, id)
}

// erasureCommand runs a decision and answers the erasure id as the read
// models show it once they hold the decision.
func (s *Server) erasureCommand(r *http.Request, cmd domain.Command, id string) (int, any, error) {
	res, err := s.execute(r.Context(), cmd)
	if err != nil {
		return 0, nil, err
	}
	x, err := s.erasureAnswer(r, res, id)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, x, nil
}

// erasureAnswer reads the erasure a command recorded or answered (id for
// a decision), once the read models hold the command.
func (s *Server) erasureAnswer(r *http.Request, res settlement.Result, id string) (erasureJSON, error) {
	if res.Replay != nil {
		id = res.Replay.Erasure
	}
	for _, e := range res.Events {
		if x, ok := e.(*domain.PersonalDataErasureProposed); ok {
			id = x.Erasure
		}
	}
	if err := s.waitFor(r.Context(), res.LastSeq()); err != nil {
		return erasureJSON{}, err
	}
	return s.findErasure(r, id)
}

// findErasure reads one erasure.
func (s *Server) findErasure(r *http.Request, id string) (erasureJSON, error) {
	xs, err := s.cfg.Store.Erasures(r.Context(), projections.ErasureQuery{ID: id})
	return oneProposal(xs, err, "erasure", id, answerErasure)
}

// erasureID returns the path's erasure id, checked.
func erasureID(r *http.Request) (string, error) {
	return proposalID(r, "erasure", "ER", domain.ErasureNumber)
}

// getErasure answers one erasure.
func (s *Server) getErasure(r *http.Request, _ *Claims) (int, any, error) {
	return getProposal(s, r, erasureID, s.findErasure)
}

// erasures lists the newest erasures, oldest first: every one, those
// pending (?state=pending), or those pending that the caller may approve
// (?state=pending&awaiting=me: proposed by someone else, not expired).
func (s *Server) erasures(r *http.Request, c *Claims) (int, any, error) {
	pending, awaiting, err := pendingQuery(r)
	if err != nil {
		return 0, nil, err
	}
	if err := s.waitMin(r); err != nil {
		return 0, nil, err
	}
	xs, err := s.cfg.Store.Erasures(r.Context(), projections.ErasureQuery{Pending: pending})
	if err != nil {
		return 0, nil, fmt.Errorf("erasures: %w", err)
	}
	now := time.Now()
	out := erasuresJSON{Erasures: []erasureJSON{}}
	me := s.storedSubject(c)
	for _, x := range xs {
		a := answerErasure(x, now)
		if awaiting && !awaits(c, me, a.State, x.ProposedBy) {
			continue
		}
		out.Erasures = append(out.Erasures, a)
	}
	return http.StatusOK, out, nil
}
