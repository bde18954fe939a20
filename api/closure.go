package api

import (
	"net/http"

	"github.com/fdj/tresor/domain"
)

// closeAccount closes an account (POST /v1/players/{player}/closure,
// {"reason"}) and answers it, closed.
func (s *Server) closeAccount(r *http.Request, c *Claims) (int, any, error) {
	return s.closure(r, c, func(p, reason string, by *domain.Actor) domain.Command {
		return domain.CloseAccount{Player: p, Reason: reason, By: by}
	})
}

// reopenAccount reopens a closed account (DELETE
// /v1/players/{player}/closure, {"reason"}) and answers it.
func (s *Server) reopenAccount(r *http.Request, c *Claims) (int, any, error) {
	return s.closure(r, c, func(p, reason string, by *domain.Actor) domain.Command {
		return domain.ReopenAccount{Player: p, Reason: reason, By: by}
	})
}

// closure runs the closure or reopening mk builds from the request.
func (s *Server) closure(r *http.Request, c *Claims, mk func(p, reason string, by *domain.Actor) domain.Command) (int, any, error) {
	p, err := player(r)
	if err != nil {
		return 0, nil, err
	}
	reason, by, err := s.reasonAndActor(r, c)
	if err != nil {
		return 0, nil, err
	}
	res, err := s.execute(r.Context(), mk(p, reason, by))
	if err != nil {
		return 0, nil, err
	}
	return s.readAccount(r, p, res.LastSeq())
}
