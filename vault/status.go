package vault

import (
	"encoding/json"
	"net/http"
	"slices"

	"github.com/fdj/tresor/audit"
)

// The vault's own alarm codes, beside the auditor's: they are the state of
// the source, not a property of an event, and hold while the condition
// does. Codes are a contract (docs/vault.md): never rename one.
const (
	// CodeSourceUnreachable: the operator's stream has not answered the
	// vault's probes for UnreachableAfter; its sequence is the next one the
	// vault waits for.
	CodeSourceUnreachable audit.Code = "source_unreachable"
	// CodeSealOverdue: events the vault received more than SealOverdue ago
	// are covered by no seal yet; its sequence is the first of them.
	CodeSealOverdue audit.Code = "seal_overdue"
	// CodeFork: the operator's stream holds, at a position the vault's
	// copy holds too, another event (or none): Fork says which.
	CodeFork audit.Code = "fork"
)

// Fork is a position where the operator's stream and the vault's copy
// differ: the first event of its chain that differs.
type Fork struct {
	Sequence uint64 `json:"sequence"`
	Chain    string `json:"chain"`
	ChainSeq uint64 `json:"chain_seq"`
	// VaultHash is the hash of the copy's event there; SourceHash the
	// source's stated hash, "" when the source holds no event there.
	VaultHash  string `json:"vault_hash"`
	SourceHash string `json:"source_hash"`
}

// Status is what GET /v1/vault/status answers. Its keys are a contract
// (docs/vault.md): never rename one.
type Status struct {
	// SourceSeq is the operator's stream's last sequence as last seen.
	SourceSeq uint64 `json:"source_seq"`
	// VerifiedSeq is the last sequence copied and verified.
	VerifiedSeq uint64 `json:"verified_seq"`
	// LagEvents is SourceSeq less VerifiedSeq (0 when the source is
	// behind, as after a fork that shortened it).
	LagEvents uint64 `json:"lag_events"`
	// LagSeconds is how long ago the vault learned that the source holds
	// the oldest event it has not verified yet (0 when it has verified
	// all it knows of).
	LagSeconds float64 `json:"lag_seconds"` // float-ok: a duration, not money
	// LastSealSeq is the sequence of the last seal verified.
	LastSealSeq uint64 `json:"last_seal_seq"`
	// Violations are the auditor's first violations by sequence, then the
	// vault's alarms in force (source_unreachable, seal_overdue, and a
	// sequence_gap of the source).
	Violations []audit.Violation `json:"violations"`
	// Forks are the positions where the source differs from the copy.
	Forks []Fork `json:"forks"`

	// counts are the violations by code (all of them, not only those
	// listed), for the metrics.
	counts map[audit.Code]int
	// sourceUp, unsealedSeconds and overdue feed the metrics too.
	sourceUp        bool
	unsealedSeconds float64 // float-ok: a duration
	overdue         bool
}

// clone returns a copy that shares nothing with s.
func (s *Status) clone() *Status {
	c := *s
	c.Violations = slices.Clone(s.Violations)
	c.Forks = slices.Clone(s.Forks)
	return &c
}

// Handler serves GET /v1/vault/status and, with a cosignature key, GET
// /v1/vault/cosignatures.
func (v *Vault) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/vault/status", func(w http.ResponseWriter, _ *http.Request) {
		st := v.Status()
		if st.Violations == nil {
			st.Violations = []audit.Violation{}
		}
		if st.Forks == nil {
			st.Forks = []Fork{}
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(st)
	})
	if v.cosigner != nil {
		mux.HandleFunc("GET /v1/vault/cosignatures", v.cosigner.serve)
	}
	return mux
}

// Status returns the vault's status as last published.
func (v *Vault) Status() *Status {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.published.clone()
}
