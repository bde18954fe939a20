package api

import (
	"context"
	"fmt"
	"net/http"

	"github.com/fdj/tresor/domain"
	"github.com/fdj/tresor/projections"
)

// suspendRequest is the body of POST /v1/sales/suspensions: what to
// suspend and why.
type suspendRequest struct {
	Scope  string `json:"scope"`
	Reason string `json:"reason"`
}

// reasonRequest is a body that says why alone: the end of a suspension,
// a closure, a reopening.
type reasonRequest struct {
	Reason string `json:"reason"`
}

// suspensionJSON is a suspension as the API answers it.
type suspensionJSON struct {
	projections.Suspension
	InForce bool `json:"in_force"`
}

func answerSuspension(x projections.Suspension) suspensionJSON {
	return suspensionJSON{Suspension: x, InForce: x.ResumedAt == nil}
}

// suspensionsJSON lists suspensions.
type suspensionsJSON struct {
	Suspensions []suspensionJSON `json:"suspensions"`
}

// suspend records a suspension of sales (201), or answers the one in force
// of the same scope and reason (200: a retry).
func (s *Server) suspend(r *http.Request, c *Claims) (int, any, error) {
	var req suspendRequest
	if err := decode(r, &req); err != nil {
		return 0, nil, err
	}
	by, err := s.actor(r, c)
	if err != nil {
		return 0, nil, err
	}
	return s.salesCommand(r, domain.SuspendSales{Scope: req.Scope, Reason: req.Reason, By: by}, "")
}

// resume ends a suspension of sales.
func (s *Server) resume(r *http.Request, c *Claims) (int, any, error) {
	id, err := suspensionID(r)
	if err != nil {
		return 0, nil, err
	}
	reason, by, err := s.reasonAndActor(r, c)
	if err != nil {
		return 0, nil, err
	}
	return s.salesCommand(r, domain.ResumeSales{Suspension: id, Reason: reason, By: by}, id)
}

// reasonAndActor reads a body of a reason alone and who gives the
// command.
func (s *Server) reasonAndActor(r *http.Request, c *Claims) (string, *domain.Actor, error) {
	var req reasonRequest
	if err := decode(r, &req); err != nil {
		return "", nil, err
	}
	by, err := s.actor(r, c)
	return req.Reason, by, err
}

// salesCommand runs a suspension or its end and answers the suspension:
// the one named id, or the one the command recorded (201) or answered (a
// retry), as the read models show it once they hold the command.
func (s *Server) salesCommand(r *http.Request, cmd domain.Command, id string) (int, any, error) {
	res, err := s.execute(r.Context(), cmd)
	if err != nil {
		return 0, nil, err
	}
	status := http.StatusOK
	if res.Replay != nil {
		id = res.Replay.Suspension
	}
	for _, e := range res.Events {
		if x, ok := e.(*domain.SalesSuspended); ok {
			id, status = x.Suspension, http.StatusCreated
		}
	}
	if err := s.waitFor(r.Context(), res.LastSeq()); err != nil {
		return 0, nil, err
	}
	x, err := s.findSuspension(r.Context(), id)
	if err != nil {
		return 0, nil, err
	}
	return status, answerSuspension(x), nil
}

// findSuspension reads one suspension.
func (s *Server) findSuspension(ctx context.Context, id string) (projections.Suspension, error) {
	all, err := s.cfg.Store.Suspensions(ctx)
	if err != nil {
		return projections.Suspension{}, fmt.Errorf("suspensions: %w", err)
	}
	for _, x := range all {
		if x.ID == id {
			return x, nil
		}
	}
	return projections.Suspension{}, &domain.Error{Code: domain.CodeNotFound, Message: fmt.Sprintf("no suspension %s among those in force and the newest resumed", id)}
}

// suspensionID returns the path's suspension id, checked.
func suspensionID(r *http.Request) (string, error) {
	id := r.PathValue("suspension")
	if !domain.ValidID(id) {
		return "", invalidf("suspension id %.80q is not valid", id)
	}
	return id, nil
}

// suspensions answers the suspensions in force and the newest resumed,
// oldest first.
func (s *Server) suspensions(r *http.Request, _ *Claims) (int, any, error) {
	if err := s.waitMin(r); err != nil {
		return 0, nil, err
	}
	all, err := s.cfg.Store.Suspensions(r.Context())
	if err != nil {
		return 0, nil, fmt.Errorf("suspensions: %w", err)
	}
	out := suspensionsJSON{Suspensions: []suspensionJSON{}}
	for _, x := range all {
		out.Suspensions = append(out.Suspensions, answerSuspension(x))
	}
	return http.StatusOK, out, nil
}

func (s *Server) getSuspension(r *http.Request, _ *Claims) (int, any, error) {
	id, err := suspensionID(r)
	if err != nil {
		return 0, nil, err
	}
	if err := s.waitMin(r); err != nil {
		return 0, nil, err
	}
	x, err := s.findSuspension(r.Context(), id)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, answerSuspension(x), nil
}

// salesSuspended returns the suspensions in force, for readiness: nil when
// none is, or when the read models cannot tell (readiness answers without
// them rather than fail).
func (s *Server) salesSuspended(ctx context.Context) []projections.Suspension {
	if s.cfg.Store == nil {
		return nil
	}
	all, err := s.cfg.Store.Suspensions(ctx)
	if err != nil {
		s.cfg.Logger.Warn("readiness without the suspensions of sales", "err", err)
		return nil
	}
	var out []projections.Suspension
	for _, x := range all {
		if x.ResumedAt == nil {
			out = append(out, x)
		}
	}
	return out
}
