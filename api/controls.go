package api

import (
	"bytes"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/fdj/tresor/domain"
	"github.com/fdj/tresor/projections"
)

// banRequest is the body of POST /v1/players/{player}/bans and of DELETE
// /v1/players/{player}/bans/{ban}: the reference of the decision and why.
type banRequest struct {
	Reference string `json:"reference"`
	Reason    string `json:"reason"`
}

// banJSON is a ban as the API answers it.
type banJSON struct {
	projections.Ban
	InForce bool `json:"in_force"`
}

// banID returns the path's ban id, checked.
func banID(r *http.Request) (string, error) {
	id := r.PathValue("ban")
	if !domain.ValidID(id) {
		return "", invalidf("ban id %.80q is not valid", id)
	}
	return id, nil
}

// findBan reads one ban of a player.
func (s *Server) findBan(r *http.Request, player, id string) (banJSON, error) {
	bans, err := s.cfg.Store.Bans(r.Context(), player)
	if err != nil {
		return banJSON{}, fmt.Errorf("bans of %s: %w", player, err)
	}
	for _, b := range bans {
		if b.Ban == id {
			return banJSON{Ban: b, InForce: b.LiftedAt == nil}, nil
		}
	}
	return banJSON{}, &domain.Error{Code: domain.CodeNotFound, Message: fmt.Sprintf("no ban %s of player %s", id, player)}
}

// ban records a ban (201), or answers the ban a decision already recorded
// (200: a retry).
func (s *Server) ban(r *http.Request, c *Claims) (int, any, error) {
	return s.banCommand(r, c, "", func(p string, req banRequest, by *domain.Actor) domain.Command {
		return domain.BanPlayer{Player: p, Reference: req.Reference, Reason: req.Reason, By: by}
	})
}

// liftBan lifts a ban; lifting a lifted ban answers it (200).
func (s *Server) liftBan(r *http.Request, c *Claims) (int, any, error) {
	id, err := banID(r)
	if err != nil {
		return 0, nil, err
	}
	return s.banCommand(r, c, id, func(p string, req banRequest, by *domain.Actor) domain.Command {
		return domain.LiftBan{Player: p, Ban: id, Reference: req.Reference, Reason: req.Reason, By: by}
	})
}

// banCommand runs the ban or lifting mk builds from the request and
// answers the ban: the one named id, or the one the command recorded (201)
// or answered (a retry).
func (s *Server) banCommand(r *http.Request, c *Claims, id string, mk func(p string, req banRequest, by *domain.Actor) domain.Command) (int, any, error) {
	p, err := player(r)
	if err != nil {
		return 0, nil, err
	}
	var req banRequest
	if err := decode(r, &req); err != nil {
		return 0, nil, err
	}
	by, err := s.actor(r, c)
	if err != nil {
		return 0, nil, err
	}
	res, err := s.execute(r.Context(), mk(p, req, by))
	if err != nil {
		return 0, nil, err
	}
	status := http.StatusOK
	if res.Replay != nil {
		id = res.Replay.Ban
	}
	for _, e := range res.Events {
		if b, ok := e.(*domain.PlayerBanned); ok {
			id, status = b.Ban, http.StatusCreated
		}
	}
	if err := s.waitFor(r.Context(), res.LastSeq()); err != nil {
		return 0, nil, err
	}
	b, err := s.findBan(r, p, id)
	if err != nil {
		return 0, nil, err
	}
	return status, b, nil
}

// bansJSON is a player's bans, in force and lifted.
type bansJSON struct {
	Bans []banJSON `json:"bans"`
}

func (s *Server) bans(r *http.Request, _ *Claims) (int, any, error) {
	p, err := player(r)
	if err != nil {
		return 0, nil, err
	}
	if err := s.waitMin(r); err != nil {
		return 0, nil, err
	}
	if _, err := s.cfg.Store.Account(r.Context(), p); err != nil {
		return 0, nil, fmt.Errorf("account %s: %w", p, err)
	}
	bans, err := s.cfg.Store.Bans(r.Context(), p)
	if err != nil {
		return 0, nil, fmt.Errorf("bans of %s: %w", p, err)
	}
	out := bansJSON{Bans: []banJSON{}}
	for _, b := range bans {
		out.Bans = append(out.Bans, banJSON{Ban: b, InForce: b.LiftedAt == nil})
	}
	return http.StatusOK, out, nil
}

func (s *Server) getBan(r *http.Request, _ *Claims) (int, any, error) {
	p, err := player(r)
	if err != nil {
		return 0, nil, err
	}
	id, err := banID(r)
	if err != nil {
		return 0, nil, err
	}
	if err := s.waitMin(r); err != nil {
		return 0, nil, err
	}
	b, err := s.findBan(r, p, id)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, b, nil
}

// instant reads a query time: RFC 3339, or a day (YYYY-MM-DD) meaning its
// first instant, or with end the first instant after it (the day
// included).
func instant(name, v string, end bool) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return t, nil
	}
	t, err := time.Parse(time.DateOnly, v)
	if err != nil {
		return time.Time{}, invalidf("%s %.64q: want an RFC 3339 time or a day YYYY-MM-DD", name, v)
	}
	if end {
		t = t.AddDate(0, 0, 1)
	}
	return t, nil
}

// balanceJSON is a player's balance at an instant.
type balanceJSON struct {
	Player  string        `json:"player"`
	At      time.Time     `json:"at"`
	Balance domain.Amount `json:"balance"`
	Seq     uint64        `json:"seq"`
}

// balanceAt answers GET .../account?at=TIME: the balance before anything
// recorded at or after that instant.
func (s *Server) balanceAt(r *http.Request, p, at string, seq uint64) (int, any, error) {
	t, err := instant("at", at, false)
	if err != nil {
		return 0, nil, err
	}
	if err := s.waitFor(r.Context(), seq); err != nil {
		return 0, nil, err
	}
	st, err := s.cfg.Store.Statement(r.Context(), projections.StatementQuery{Player: p, From: t, To: t, Limit: 1})
	if err != nil {
		return 0, nil, fmt.Errorf("balance of %s at %s: %w", p, at, err)
	}
	return http.StatusOK, balanceJSON{Player: p, At: t.UTC(), Balance: st.Opening, Seq: st.Seq}, nil
}

// statementJSON is a statement as the API answers it.
type statementJSON struct {
	projections.Statement
	From *time.Time `json:"from,omitempty"`
	To   *time.Time `json:"to,omitempty"`
}

// statementHeader is the CSV header of statements: the opening and closing
// balances are rows of their own kind ("opening", "closing").
var statementHeader = []string{"id", "seq", "at", "kind", "amount", "balance_before", "balance_after", "ref"}

// statement answers GET /v1/players/{player}/statement?from=&to=&after=&limit=,
// in JSON or, with Accept: text/csv, CSV.
func (s *Server) statement(r *http.Request, _ *Claims) (int, any, error) {
	p, err := player(r)
	if err != nil {
		return 0, nil, err
	}
	q := r.URL.Query()
	sq := projections.StatementQuery{Player: p}
	var out statementJSON
	if v := q.Get("from"); v != "" {
		if sq.From, err = instant("from", v, false); err != nil {
			return 0, nil, err
		}
		out.From = &sq.From
	}
	if v := q.Get("to"); v != "" {
		if sq.To, err = instant("to", v, true); err != nil {
			return 0, nil, err
		}
		out.To = &sq.To
	}
	if v := q.Get("after"); v != "" {
		if sq.After, err = strconv.ParseUint(v, 10, 64); err != nil {
			return 0, nil, invalidf("after %.32q: want the next cursor of a page", v)
		}
	}
	if v := q.Get("limit"); v != "" {
		if sq.Limit, err = strconv.Atoi(v); err != nil || sq.Limit < 1 || sq.Limit > projections.StatementPageMax {
			return 0, nil, invalidf("limit %.32q: want 1 to %d", v, projections.StatementPageMax)
		}
	}
	if err := s.waitMin(r); err != nil {
		return 0, nil, err
	}
	if out.Statement, err = s.cfg.Store.Statement(r.Context(), sq); err != nil {
		return 0, nil, fmt.Errorf("statement of %s: %w", p, err)
	}
	if !wantsCSV(r) {
		return http.StatusOK, out, nil
	}
	rows := append([]projections.Movement{{Kind: "opening", BalanceAfter: out.Opening, Seq: out.Seq}}, out.Movements...)
	if out.Next == 0 {
		rows = append(rows, projections.Movement{Kind: "closing", BalanceAfter: out.Closing, Seq: out.Seq})
	}
	var buf bytes.Buffer
	err = projections.CSV(&buf, statementHeader, rows, func(m projections.Movement) []string {
		if m.Kind == "opening" || m.Kind == "closing" {
			return []string{"", strconv.FormatUint(m.Seq, 10), "", string(m.Kind), "", "", m.BalanceAfter.String(), ""}
		}
		return []string{m.ID, strconv.FormatUint(m.Seq, 10), m.At.UTC().Format(time.RFC3339Nano), string(m.Kind), m.Amount.String(),
			m.BalanceBefore.String(), m.BalanceAfter.String(), m.Ref}
	})
	if err != nil {
		return 0, nil, err
	}
	h := http.Header{"Tresor-Stream-Seq": {strconv.FormatUint(out.Seq, 10)}}
	if out.Next != 0 {
		h.Set("Tresor-Next", strconv.FormatUint(out.Next, 10))
	}
	return http.StatusOK, csvAnswer{body: buf.String(), header: h}, nil
}

// wantsCSV reports whether the client asks for CSV.
func wantsCSV(r *http.Request) bool { return strings.Contains(r.Header.Get("Accept"), "text/csv") }

// csvAnswer is a CSV answer with headers of its own.
type csvAnswer struct {
	body   string
	header http.Header
}

// Limits of the large-wins report.
const (
	// LargeWinThresholdDefault is the threshold when a request gives none.
	LargeWinThresholdDefault domain.Amount = 1000_00
	// largeWinsDefault is how many wins a report lists unless asked.
	largeWinsDefault = 1000
)

// reportKinds are the reports served under /v1/reports/.
var reportKinds = projections.ReportKinds

// report answers GET /v1/reports/{kind}?from=&to=(&threshold=&limit=), in
// JSON or, with Accept: text/csv, CSV with the report's identity in
// headers.
func (s *Server) report(kind string) handler {
	return func(r *http.Request, _ *Claims) (int, any, error) {
		q := r.URL.Query()
		rq := projections.ReportQuery{Kind: kind, From: q.Get("from"), To: q.Get("to"), Threshold: LargeWinThresholdDefault, Limit: largeWinsDefault, Now: time.Now()}
		if kind != projections.ReportLargeWins && (q.Has("threshold") || q.Has("limit")) {
			return 0, nil, invalidf("threshold and limit are the large-wins report's")
		}
		if v := q.Get("threshold"); v != "" {
			a, err := amount("threshold", v)
			if err != nil || a == 0 {
				return 0, nil, invalidf("threshold %.32q: want a positive amount", v)
			}
			rq.Threshold = a
		}
		if v := q.Get("limit"); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > projections.LargeWinsMax {
				return 0, nil, invalidf("limit %.32q: want 1 to %d", v, projections.LargeWinsMax)
			}
			rq.Limit = n
		}
		if err := s.waitMin(r); err != nil {
			return 0, nil, err
		}
		rules := s.cfg.Rules
		if rules == nil {
			var err error
			if rules, err = domain.DefaultRules(); err != nil {
				return 0, nil, err
			}
		}
		rep, err := projections.BuildReport(r.Context(), s.cfg.Store, rules, rq)
		if err != nil {
			return 0, nil, err
		}
		if !wantsCSV(r) {
			return http.StatusOK, rep, nil
		}
		var buf bytes.Buffer
		if err := rep.WriteCSV(&buf); err != nil {
			return 0, nil, err
		}
		return http.StatusOK, csvAnswer{body: buf.String(), header: http.Header{
			"Tresor-Report": {kind}, "Tresor-Period-From": {rep.Period.From}, "Tresor-Period-To": {rep.Period.To},
			"Tresor-Generated-At": {rep.GeneratedAt.Format(time.RFC3339Nano)}, "Tresor-Stream-Seq": {strconv.FormatUint(rep.StreamSeq, 10)},
		}}, nil
	}
}
