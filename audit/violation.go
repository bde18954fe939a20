package audit

import (
	"cmp"
	"errors"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/fdj/tresor/eventstore"
)

// Code names a kind of violation. Codes are a contract with the tools that
// read audit reports (docs/audit.md lists them): never rename one.
type Code string

// Integrity of the log.
const (
	// CodeHashMismatch: an event's bytes do not hash to its stated hash.
	CodeHashMismatch Code = "hash_mismatch"
	// CodeChainBroken: an event does not link to its chain's previous event
	// (prev_hash, chain_seq, a chain not starting at 1, stream order).
	CodeChainBroken Code = "chain_broken"
	// CodeSealInvalid: a seal is malformed, not signed by the operator's
	// key, or does not name the chain's event at its position.
	CodeSealInvalid Code = "seal_invalid"
	// CodeSealKeyRetired: a seal, validly signed, by a key its chain
	// retired at an earlier position: whoever holds an old key must not
	// be able to vouch for what came after it.
	CodeSealKeyRetired Code = "seal_key_retired"
	// CodeSealRevoked: a SealKeyRevoked event withdrew a compromised key's
	// seals from a position: the violation names the seals that no
	// longer count, which the chain up to them relied on.
	CodeSealRevoked Code = "seal_revoked"
	// CodeSealMissing: a run of a chain longer than Config.SealGapMax
	// without a valid seal: a log rewritten by someone without the
	// operator's key can only leave its seals out.
	CodeSealMissing Code = "seal_missing"
	// CodeMalformedEvent: an event cannot be read (headers, payload JSON,
	// unknown type or schema version, aggregate not matching its payload).
	CodeMalformedEvent Code = "malformed_event"
	// CodeSequenceGap: the source skipped stream sequences.
	CodeSequenceGap Code = "sequence_gap"
)

// Blocks and their commitments.
const (
	// CodeEmissionInvalid: an emission of an unknown price, of another rule
	// set, or created twice.
	CodeEmissionInvalid Code = "emission_invalid"
	// CodeBlockInvalid: a block opened out of its emission's order, twice,
	// at another price than its emission's, or while another block of its
	// price is on sale.
	CodeBlockInvalid Code = "block_invalid"
	// CodeCommitmentMalformed: a BlockOpened commitment with a zero hash or
	// root, or a size other than the rules' block size.
	CodeCommitmentMalformed Code = "commitment_malformed"
	// CodeBlockState: an event that the block's state forbids (exhausted
	// before it sold out, closed twice or with plays in progress, an event
	// for an unknown block).
	CodeBlockState Code = "block_state"
	// CodeSeedMismatch: a revealed seed does not hash to the committed seed
	// hash, or its deck does not have the committed root.
	CodeSeedMismatch Code = "seed_mismatch"
	// CodeUnitMismatch: a sold unit's tier or salt differs from the
	// revealed deck's.
	CodeUnitMismatch Code = "unit_mismatch"
	// CodeArticle3: a sold-out block's tier counts or prize total differ
	// from its Article 3 table.
	CodeArticle3 Code = "article3_mismatch"
)

// Units and plays.
const (
	// CodeUnitReassigned: a unit sold a second time.
	CodeUnitReassigned Code = "unit_reassigned"
	// CodeUnitOrder: a unit sold out of deck order, or a play whose id,
	// player, block or unit disagree between its events.
	CodeUnitOrder Code = "unit_order"
	// CodeStakePrice: a stake other than the block's price.
	CodeStakePrice Code = "stake_price"
	// CodeProofInvalid: a unit's inclusion proof does not lead to its
	// block's committed root.
	CodeProofInvalid Code = "proof_invalid"
	// CodePlaySequence: a play's events out of their order: a unit without
	// a stake, a stake without a unit, a throw out of turn or after the
	// fourth, a settlement before four throws or twice, an event for an
	// unknown play.
	CodePlaySequence Code = "play_sequence"
	// CodeScenarioMismatch: the throws shown are not the unit's scenario,
	// or the scenario does not evaluate to the unit's tier.
	CodeScenarioMismatch Code = "scenario_mismatch"
	// CodeTierMismatch: a settlement's tier differs from its unit's.
	CodeTierMismatch Code = "tier_mismatch"
	// CodePrizeAmount: a settlement's prize differs from Article 4.5 for its
	// tier and price.
	CodePrizeAmount Code = "prize_amount"
	// CodePrizePayment: a prize paid without a winning settlement, twice,
	// of another amount, or a winning settlement never paid.
	CodePrizePayment Code = "prize_payment"
)

// Money.
const (
	// CodeAccountInvalid: an account opened twice, or an event for an
	// account never opened.
	CodeAccountInvalid Code = "account_invalid"
	// CodeInvalidAmount: a movement of money that is not positive.
	CodeInvalidAmount Code = "invalid_amount"
	// CodeNegativeBalance: a player's balance below zero.
	CodeNegativeBalance Code = "negative_balance"
	// CodeBalanceMismatch: an event's balance_after differs from the
	// balance the postings give.
	CodeBalanceMismatch Code = "balance_mismatch"
	// CodeBooksUnbalanced: debits differ from credits, the accounts do not
	// sum to zero, or a player's balance differs from deposits −
	// withdrawals − stakes + prizes.
	CodeBooksUnbalanced Code = "books_unbalanced"
)

// Responsible-gaming controls, re-derived from the events (settings,
// limits, self-exclusions, bans) and the movements they govern.
const (
	// CodeExclusionBreached: a deposit or a stake accepted while its
	// player was self-excluded (for good, or within a term) or banned.
	CodeExclusionBreached Code = "exclusion_breached"
	// CodeLimitBreached: a deposit or a stake accepted above a limit in
	// force over its period, or before any limit of its kind when the
	// settings require one.
	CodeLimitBreached Code = "limit_breached"
	// CodeLimitChangeInvalid: a raise effective before the settings'
	// delay, a lowering or first limit not effective at once, or a new
	// limit of a period the settings do not offer.
	CodeLimitChangeInvalid Code = "limit_change_invalid"
	// CodeExclusionInvalid: a self-exclusion term that shortens the one in
	// force, or ends outside the settings' range.
	CodeExclusionInvalid Code = "exclusion_invalid"
	// CodeBanInvalid: a ban id recorded twice, a lifting of a ban not in
	// force, or a ban or lifting without its decision's reference and a
	// reason.
	CodeBanInvalid Code = "ban_invalid"
	// CodeRevocationInvalid: a token revocation not recorded by an
	// operator, or naming neither one token nor one subject (or both).
	CodeRevocationInvalid Code = "revocation_invalid"
	// CodeReasonMissing: an exceptional action of the operator's staff (a
	// block closed early, an exclusion recorded) without a reason.
	CodeReasonMissing Code = "reason_missing"
	// CodeSettingsInvalid: a SettingsAdopted outside the settings' bounds.
	CodeSettingsInvalid Code = "settings_invalid"
	// CodeSuspensionBreached: a stake accepted while a suspension of sales
	// in force covered its price, its block or its emission.
	CodeSuspensionBreached Code = "suspension_breached"
	// CodeSuspensionInvalid: a suspension id recorded twice, the end of a
	// suspension not in force or of another scope, or either without who
	// gave it and why.
	CodeSuspensionInvalid Code = "suspension_invalid"
	// CodeClosedAccountMoved: a deposit, a withdrawal, a stake or a prize
	// on a closed account.
	CodeClosedAccountMoved Code = "closed_account_moved"
	// CodeClosureInvalid: an account closed with money on it or closed
	// twice, a reopening of an open account or not by the operator, or
	// either without who asked and why.
	CodeClosureInvalid Code = "closure_invalid"
	// CodeAdjustmentInvalid: an adjustment proposed twice or not by staff,
	// without a reference or a reason or with another expiry than the
	// settings', decided without a proposal, twice, not by staff, or
	// approved with other terms than proposed.
	CodeAdjustmentInvalid Code = "adjustment_invalid"
	// CodeFourEyesBroken: an adjustment or an erasure approved or
	// rejected by the subject who proposed it.
	CodeFourEyesBroken Code = "four_eyes_broken"
	// CodeAdjustmentExpired: an adjustment approved or rejected at or
	// after its expiry.
	CodeAdjustmentExpired Code = "adjustment_expired"
	// CodeErasureInvalid: an erasure of personal data (or its proposal)
	// not by staff, on an unknown ground, a legal ground without its text
	// or the end of a retention not ended, of an open account, or of a
	// staff subject without the data key it destroys; from schema 2, an
	// erasure approving no proposal, another person's, one decided
	// already or expired, or with other terms than proposed; a proposal
	// with an id used twice or another expiry than the settings'; a
	// rejection without a reason.
	CodeErasureInvalid Code = "erasure_invalid"
)

// Incremental audits (docs/audit.md, "Incremental audits").
const (
	// CodeContinuityBroken: the stream no longer holds, at the position a
	// saved audit state verified, the event it verified there (rewritten
	// before that position, truncated, or another stream).
	CodeContinuityBroken Code = "continuity_broken"
)

// Evidence of the tail.
const (
	// CodeStreamTruncated: the stream ends short of a position that
	// evidence kept outside it names (a saved audit state, the writer's
	// high-water mark of acknowledged commits): acknowledged events were
	// lost, as a damaged disk loses them.
	CodeStreamTruncated Code = "stream_truncated"
	// CodeAppendTorn: the stream ends inside an append (its events
	// announce more than follow) with no Void after it: a write cut short
	// that the writer has not voided yet. Its events are checked against
	// the chain but not applied.
	CodeAppendTorn Code = "append_torn"
)

// Read models.
const (
	// CodeProjectionMismatch: a PostgreSQL read-model row differs from the
	// one the replay derives.
	CodeProjectionMismatch Code = "projection_mismatch"
)

// Violation is one broken property, where it was found and what was
// expected versus found. Sequence is 0 for a violation of the stream as a
// whole (books, read models).
type Violation struct {
	Sequence uint64 `json:"sequence"`
	Code     Code   `json:"code"`
	// Subject names what the violation is about: a play, a block, an
	// account, a chain.
	Subject  string `json:"subject"`
	Expected string `json:"expected"`
	Found    string `json:"found"`
}

// violations collects violations from every stage: it counts all of them
// and keeps the first max by stream sequence.
type violations struct {
	mu     sync.Mutex
	max    int
	kept   []Violation
	total  int
	byCode map[Code]int
}

func newViolations(max int) *violations {
	return &violations{max: max, byCode: map[Code]int{}}
}

func (vs *violations) add(v Violation) {
	vs.mu.Lock()
	defer vs.mu.Unlock()
	vs.total++
	vs.byCode[v.Code]++
	vs.kept = append(vs.kept, v)
	// Workers report out of order: trim only once twice the limit is held,
	// so trimming stays amortised and the first max by sequence survive.
	if len(vs.kept) >= 2*vs.max {
		vs.trim()
	}
}

// trim sorts the kept violations by sequence and drops all but the first
// max; whole-stream violations (sequence 0) sort last.
func (vs *violations) trim() {
	slices.SortStableFunc(vs.kept, func(a, b Violation) int {
		if (a.Sequence == 0) != (b.Sequence == 0) {
			return cmp.Compare(b.Sequence, a.Sequence)
		}
		return cmp.Compare(a.Sequence, b.Sequence)
	})
	if len(vs.kept) > vs.max {
		vs.kept = vs.kept[:vs.max]
	}
}

// save returns the violations found so far, the kept ones trimmed.
func (vs *violations) save() savedViolations {
	vs.mu.Lock()
	defer vs.mu.Unlock()
	vs.trim()
	return savedViolations{Total: vs.total, Counts: maps.Clone(vs.byCode), Kept: slices.Clone(vs.kept)}
}

// fromIntegrity turns a verifier or store error into a violation; ok is
// false for an error that is not about the log's integrity.
func fromIntegrity(err error) (Violation, bool) {
	var ie *eventstore.IntegrityError
	if !errors.As(err, &ie) {
		return Violation{}, false
	}
	code := CodeChainBroken
	switch {
	case ie.What == "hash":
		code = CodeHashMismatch
	case ie.What == "seal key retired":
		code = CodeSealKeyRetired
	case ie.What == "seal revoked":
		code = CodeSealRevoked
	case strings.HasPrefix(ie.What, "seal"):
		code = CodeSealInvalid
	case strings.HasPrefix(ie.What, "header") || ie.What == "subject":
		code = CodeMalformedEvent
	}
	return Violation{Sequence: ie.Sequence, Code: code, Subject: ie.Subject + ": " + ie.What, Expected: ie.Expected, Found: ie.Found}, true
}
