package codec

import (
	"encoding/json"
	"fmt"
	"reflect"

	"github.com/fdj/tresor/domain"
)

// commandKinds names every command on the wire, where a node that is not
// the writer forwards it to the one that is. Names are never renamed (a
// node of the previous version may be the writer during a rolling upgrade);
// command_codec_test.go fails when a command is missing.
var commandKinds = map[string]domain.Command{
	"configure_account":   domain.ConfigureAccount{},
	"deposit":             domain.Deposit{},
	"withdraw":            domain.Withdraw{},
	"create_emission":     domain.CreateEmission{},
	"place_stake":         domain.PlaceStake{},
	"make_throw":          domain.MakeThrow{},
	"complete_play":       domain.CompletePlay{},
	"close_block":         domain.CloseBlock{},
	"ban_player":          domain.BanPlayer{},
	"lift_ban":            domain.LiftBan{},
	"adopt_settings":      domain.AdoptSettings{},
	"suspend_sales":       domain.SuspendSales{},
	"resume_sales":        domain.ResumeSales{},
	"close_account":       domain.CloseAccount{},
	"reopen_account":      domain.ReopenAccount{},
	"propose_adjustment":  domain.ProposeAdjustment{},
	"approve_adjustment":  domain.ApproveAdjustment{},
	"reject_adjustment":   domain.RejectAdjustment{},
	"reseal_seeds":        domain.ResealSeeds{},
	"erase_personal_data": domain.ErasePersonalData{},
	"approve_erasure":     domain.ApproveErasure{},
	"reject_erasure":      domain.RejectErasure{},
	"revoke_tokens":       domain.RevokeTokens{},
}

// kindOf is commandKinds the other way round.
var kindOf = func() map[reflect.Type]string {
	m := make(map[reflect.Type]string, len(commandKinds))
	for k, c := range commandKinds {
		m[reflect.TypeOf(c)] = k
	}
	return m
}()

// wireCommand is a command on the wire.
type wireCommand struct {
	Kind    string          `json:"kind"`
	Command json.RawMessage `json:"command"`
}

// checkNoSecret refuses a command carrying a secret: a block's seed (a
// prepared block's, or the one CloseBlock reveals) lives in the writer's
// memory and, sealed, on the stream; it never crosses the network in
// clear. The writer fills both in itself.
func checkNoSecret(cmd domain.Command) error {
	switch c := cmd.(type) {
	case domain.CreateEmission:
		if c.First != nil {
			return fmt.Errorf("create_emission carries a prepared block (its seed): %w", domain.ErrInvalidRequest)
		}
	case domain.CloseBlock:
		if c.Seed != (domain.Seed{}) {
			return fmt.Errorf("close_block carries a seed: %w", domain.ErrInvalidRequest)
		}
	}
	return nil
}

// EncodeCommand encodes a command for another node: JSON with its kind. It
// refuses an unknown command and one carrying a secret (see
// checkNoSecret), with an error wrapping ErrInvalidRequest.
func EncodeCommand(cmd domain.Command) ([]byte, error) {
	kind, ok := kindOf[reflect.TypeOf(cmd)]
	if !ok {
		return nil, fmt.Errorf("encode command %T: unknown kind: %w", cmd, domain.ErrInvalidRequest)
	}
	if err := checkNoSecret(cmd); err != nil {
		return nil, fmt.Errorf("encode command: %w", err)
	}
	body, err := json.Marshal(cmd)
	if err != nil {
		return nil, fmt.Errorf("encode command %s: %w", kind, err)
	}
	return json.Marshal(wireCommand{Kind: kind, Command: body})
}

// DecodeCommand decodes what EncodeCommand wrote. It refuses an unknown
// kind, a body that does not decode, and a command carrying a secret, with
// an error wrapping ErrInvalidRequest.
func DecodeCommand(data []byte) (domain.Command, error) {
	var w wireCommand
	if err := json.Unmarshal(data, &w); err != nil {
		return nil, fmt.Errorf("decode command: %v: %w", err, domain.ErrInvalidRequest)
	}
	zero, ok := commandKinds[w.Kind]
	if !ok {
		return nil, fmt.Errorf("decode command: unknown kind %.40q: %w", w.Kind, domain.ErrInvalidRequest)
	}
	p := reflect.New(reflect.TypeOf(zero))
	if err := json.Unmarshal(w.Command, p.Interface()); err != nil {
		return nil, fmt.Errorf("decode command %s: %v: %w", w.Kind, err, domain.ErrInvalidRequest)
	}
	cmd := p.Elem().Interface().(domain.Command)
	if err := checkNoSecret(cmd); err != nil {
		return nil, fmt.Errorf("decode command: %w", err)
	}
	return cmd, nil
}
