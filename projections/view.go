package projections

import (
	"time"

	"github.com/fdj/tresor/domain"
)

// PlayView is a play as its player sees it: the history API's answer for
// one play (a history page holds a list of them). The map, the start and
// the chests' cells show from the start, a chest's content only once
// opened or once the play is over. It is also what `tresor verify-play`
// reads back (docs/verify-play.md), so it carries all a verifier needs: the
// unit's proof once the play is over (before, the proof would tell the
// outcome), the commitment of its block the proof leads to and, once the
// block is closed, the block's seed. Its JSON keys are a contract with
// players' and auditors' tools: add keys, never rename one.
type PlayView struct {
	PlayID     string               `json:"play_id"`
	Player     string               `json:"player"`
	Stake      domain.Amount        `json:"stake"`
	BlockID    string               `json:"block_id"`
	Unit       uint32               `json:"unit"`
	Map        MapView              `json:"map"`
	Start      *domain.Cell         `json:"start,omitempty"`
	Pawn       domain.Cell          `json:"pawn"`
	Chests     []ChestView          `json:"chests"`
	Throws     []domain.ThrowResult `json:"throws"`
	ThrowsLeft int                  `json:"throws_left"`
	Status     PlayStatus           `json:"status"`
	Tier       *domain.Tier         `json:"tier,omitempty"`
	Prize      *domain.Amount       `json:"prize,omitempty"`
	Balance    domain.Amount        `json:"balance"`
	At         time.Time            `json:"at"`
	Seq        uint64               `json:"seq"`
	// SettledSeq is the stream sequence of the last event of the play's
	// life once it is settled (its PrizePaid for a winner, else its
	// PlaySettled), absent while it is in progress: Seq is its stake's,
	// so a witness of the stream up to SettledSeq has seen the whole play.
	SettledSeq uint64            `json:"settled_seq,omitempty"`
	Proof      *domain.UnitProof `json:"proof,omitempty"`
	// BlockCommitment is the commitment BlockOpened published for the
	// block, as the read side holds it: the root and size the proof is
	// checked against. It is the operator's copy; a verifier who wants an
	// independent check compares it with the commitment published before
	// the sale.
	BlockCommitment *domain.Commitment `json:"block_commitment,omitempty"`
	// BlockSeed is the block's seed once the block is closed (BlockClosed
	// revealed it), from which anyone rebuilds the deck; absent before.
	BlockSeed *domain.Seed `json:"block_seed,omitempty"`
}

// MapView is the map's size.
type MapView struct {
	Rows int `json:"rows"`
	Cols int `json:"cols"`
}

// View returns what the play's player sees of it; block is the report of
// the play's block, whose commitment (and seed, once closed) it carries.
func (p *Play) View(block BlockReport) PlayView {
	v := PlayView{
		PlayID: p.ID, Player: p.Player, Stake: p.Stake, BlockID: p.Block, Unit: p.Unit, Status: p.Status,
		Tier: p.Tier, Prize: p.Prize, Balance: p.BalanceAfter, At: p.At, Seq: p.Seq, SettledSeq: p.SettledSeq,
		ThrowsLeft: domain.ThrowCount - len(p.Throws), Throws: []domain.ThrowResult{}, Chests: []ChestView{},
		BlockCommitment: &block.Commitment, BlockSeed: block.Seed,
	}
	// The proof's tier and salt fix every chest: shown before the
	// settlement, they would tell the outcome before the first throw.
	if p.Status != StatusInProgress {
		v.Proof = p.Proof
	}
	if sc := p.Scenario(); sc != nil {
		start := sc.Start
		v.Map, v.Start, v.Pawn, v.Chests, v.Throws = MapView{sc.Rows, sc.Cols}, &start, start, sc.Chests, sc.Throws
		if n := len(sc.Throws); n > 0 {
			v.Pawn = sc.Throws[n-1].Pawn
		}
	}
	return v
}

// PublishedCommitment is a block's commitment as Tresor publishes it to
// anyone (GET /v1/commitments, and the plain file third parties mirror):
// the commitment BlockOpened recorded before the block's first sale, where
// and when it was recorded, and, once the block is closed, the seed
// BlockClosed revealed. Nothing in it says anything about a unit. Its JSON
// keys are a contract with the archives that keep it: add keys, never
// rename one.
type PublishedCommitment struct {
	BlockID    string            `json:"block_id"`
	Emission   string            `json:"emission"`
	Index      int               `json:"index"`
	Price      domain.Amount     `json:"price"`
	Commitment domain.Commitment `json:"commitment"`
	OpenedSeq  uint64            `json:"opened_seq"`
	OpenedAt   time.Time         `json:"opened_at"`
	State      domain.BlockState `json:"state"`
	Seed       *domain.Seed      `json:"seed,omitempty"`
	ClosedAt   *time.Time        `json:"closed_at,omitempty"`
}

// Published returns what anyone may see of the block: its commitment, and
// its seed once closed (Report already hides it before).
func (b BlockReport) Published() PublishedCommitment {
	return PublishedCommitment{
		BlockID: b.ID, Emission: b.Emission, Index: b.Index, Price: b.Price, Commitment: b.Commitment,
		OpenedSeq: b.OpenedSeq, OpenedAt: b.OpenedAt, State: b.State, Seed: b.Seed, ClosedAt: b.ClosedAt,
	}
}
