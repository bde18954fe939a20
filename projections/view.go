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
// unit's proof, the commitment of its block the proof leads to and, once
// the block is closed, the block's seed. Its JSON keys are a contract with
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
	Proof      *domain.UnitProof    `json:"proof,omitempty"`
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
		Tier: p.Tier, Prize: p.Prize, Balance: p.BalanceAfter, At: p.At, Seq: p.Seq, Proof: p.Proof,
		ThrowsLeft: domain.ThrowCount - len(p.Throws), Throws: []domain.ThrowResult{}, Chests: []ChestView{},
		BlockCommitment: &block.Commitment, BlockSeed: block.Seed,
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
