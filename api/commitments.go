package api

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"

	"github.com/fdj/tresor/domain"
	"github.com/fdj/tresor/projections"
)

// Commitments are public: anyone may read and archive every block's
// commitment, so that a player's or an auditor's check of a play compares
// the play's proof with a root kept out of the operator's reach. They are
// served without a token, with an ETag and a Cache-Control that let
// mirrors and caches keep them, under a rate limit per client address.
const (
	// commitmentsMaxAge is how long a cache may serve a page without
	// asking again: a page changes only when a block opens or closes.
	commitmentsMaxAge = 10
	// commitmentsFileMax bounds the plain file (blocks in all; 100 000
	// blocks are 45 billion units, decades of sales).
	commitmentsFileMax = projections.ReconciliationRowsMax
)

// commitmentsJSON is a page of published commitments.
type commitmentsJSON struct {
	Commitments []projections.PublishedCommitment `json:"commitments"`
	Next        string                            `json:"next,omitempty"`
}

// handlePublic registers an endpoint anyone may read: no token, a rate
// limit per client address, and, as every read, nothing before the
// service is ready.
func (s *Server) handlePublic(pattern string, h func(w http.ResponseWriter, r *http.Request) error) {
	s.routes = append(s.routes, pattern)
	s.mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		host, _, err := net.SplitHostPort(r.RemoteAddr)
		if err != nil {
			host = r.RemoteAddr
		}
		switch rd := s.readiness(); {
		case !s.limiter("addr:" + host).Allow():
			s.problem(w, r, errAddrLimited)
		case rd.Status == StatusStarting:
			s.problem(w, r, fmt.Errorf("%w: starting: %s", ErrNotReady, rd.Reason))
		default:
			if err := h(w, r); err != nil {
				s.problem(w, r, err)
			}
		}
	})
}

// writeCacheable answers body with a strong ETag (its SHA-256) and a
// Cache-Control that lets any cache keep it; a request whose If-None-Match
// names the ETag (among others, weak or strong: RFC 9110 13.1.2), or is
// "*", gets 304 and no body.
func writeCacheable(w http.ResponseWriter, r *http.Request, contentType string, body []byte) {
	sum := sha256.Sum256(body)
	etag := `"` + hex.EncodeToString(sum[:16]) + `"`
	h := w.Header()
	h.Set("ETag", etag)
	h.Set("Cache-Control", "public, max-age="+strconv.Itoa(commitmentsMaxAge))
	if noneMatch(r.Header.Values("If-None-Match"), etag) {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	h.Set("Content-Type", contentType)
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(http.StatusOK)
	w.Write(body)
}

// commitments answers a page of published commitments in block id order.
func (s *Server) commitments(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	limit := projections.PageMax
	if v := q.Get("limit"); v != "" {
		var err error
		if limit, err = strconv.Atoi(v); err != nil || limit < 1 || limit > projections.PageMax {
			return invalidf("limit %q: want 1 to %d", v, projections.PageMax)
		}
	}
	after := q.Get("after")
	if after != "" && !domain.ValidID(after) {
		return invalidf("after %q is not a block id", after)
	}
	bs, err := s.cfg.Store.Blocks(r.Context(), after, limit)
	if err != nil {
		return fmt.Errorf("commitments: %w", err)
	}
	out := commitmentsJSON{Commitments: make([]projections.PublishedCommitment, 0, len(bs))}
	for _, b := range bs {
		out.Commitments = append(out.Commitments, b.Published())
	}
	if len(bs) == limit {
		out.Next = bs[len(bs)-1].ID
	}
	body, err := json.Marshal(out)
	if err != nil {
		return fmt.Errorf("commitments: %w", err)
	}
	writeCacheable(w, r, "application/json", append(body, '\n'))
	return nil
}

// commitment answers one block's published commitment.
func (s *Server) commitment(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("block")
	if !domain.ValidID(id) {
		return invalidf("block id %q is not valid", id)
	}
	b, err := s.cfg.Store.Block(r.Context(), id)
	if err != nil {
		return fmt.Errorf("commitment of %s: %w", id, err)
	}
	body, err := json.Marshal(b.Published())
	if err != nil {
		return fmt.Errorf("commitment of %s: %w", id, err)
	}
	writeCacheable(w, r, "application/json", append(body, '\n'))
	return nil
}

// commitmentsFile answers every published commitment as NDJSON, one block
// per line in block id order: the plain file a third party mirrors and
// `tresor verify-play --commitments` reads.
func (s *Server) commitmentsFile(w http.ResponseWriter, r *http.Request) error {
	var buf bytes.Buffer
	bw := bufio.NewWriter(&buf)
	enc := json.NewEncoder(bw)
	after, n := "", 0
	for {
		bs, err := s.cfg.Store.Blocks(r.Context(), after, projections.PageMax)
		if err != nil {
			return fmt.Errorf("commitments file: %w", err)
		}
		for _, b := range bs {
			if n++; n > commitmentsFileMax {
				return fmt.Errorf("commitments file: more than %d blocks", commitmentsFileMax)
			}
			if err := enc.Encode(b.Published()); err != nil {
				return fmt.Errorf("commitments file: %w", err)
			}
		}
		if len(bs) < projections.PageMax {
			break
		}
		after = bs[len(bs)-1].ID
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("commitments file: %w", err)
	}
	writeCacheable(w, r, "application/x-ndjson", buf.Bytes())
	return nil
}

// noneMatch reports whether If-None-Match fields name etag, by the weak
// comparison the field calls for (a W/ prefix ignored), or are "*".
func noneMatch(fields []string, etag string) bool {
	for _, f := range fields {
		for tag := range strings.SplitSeq(f, ",") {
			tag = strings.TrimSpace(tag)
			if tag == "*" || strings.TrimPrefix(tag, "W/") == etag {
				return true
			}
		}
	}
	return false
}

// witness relays the regulator's vault's cosignatures, which the history
// page's Verify and `tresor verify-play --cosignatures` check against the
// vault's key.
func (s *Server) witness(w http.ResponseWriter, r *http.Request) error {
	if s.cfg.Witness == nil {
		return &domain.Error{Code: domain.CodeNotFound, Message: "this service relays no cosignatures of a regulator's vault (serve --vault-cosignatures)"}
	}
	body, err := s.cfg.Witness()
	if err != nil {
		return err
	}
	writeCacheable(w, r, "application/json", body)
	return nil
}
