package domain

import (
	"errors"
	"fmt"
)

// Code is a stable error code. Clients and the API's problem details carry
// it; it is never renamed.
type Code string

// The error codes of the write side. The API maps each to an HTTP status in
// one table.
const (
	CodeInvalidRequest    Code = "invalid_request"
	CodeInvalidStake      Code = "invalid_stake"
	CodeInsufficientFunds Code = "insufficient_funds"
	CodeLimitExceeded     Code = "limit_exceeded"
	CodeSelfExcluded      Code = "self_excluded"
	// CodeBanned refuses a stake or a deposit of a player under a ban.
	CodeBanned       Code = "banned"
	CodeNotFound     Code = "not_found"
	CodeConflict     Code = "conflict"
	CodeNoOpenBlock  Code = "no_open_block"
	CodePlayFinished Code = "play_finished"
	// CodeThrowOutOfTurn refuses a throw that names a later throw than the
	// next one of its play.
	CodeThrowOutOfTurn Code = "throw_out_of_turn"
	// CodeSalesSuspended refuses a stake in a scope whose sales an
	// operator suspended; the message names the suspension.
	CodeSalesSuspended Code = "sales_suspended"
	// CodeAccountClosed refuses a deposit, a withdrawal, a stake or a
	// change of limits on a closed account.
	CodeAccountClosed Code = "account_closed"
	// CodeFourEyes refuses the approval or the rejection of an adjustment
	// by the staff subject who proposed it.
	CodeFourEyes Code = "four_eyes"
	// CodeAdjustmentExpired refuses the approval of an adjustment whose
	// time to be approved has passed: it never moves money.
	CodeAdjustmentExpired Code = "adjustment_expired"
	// CodeErasureExpired refuses the approval of an erasure whose time to
	// be approved has passed: nothing was erased.
	CodeErasureExpired Code = "erasure_expired"
	CodeForbidden      Code = "forbidden"
	CodeInternal       Code = "internal"
)

// Error is a refusal of the write side: a stable code and a message for a
// person. A refused command records nothing.
type Error struct {
	Code    Code
	Message string
}

// Error returns "code: message".
func (e *Error) Error() string { return string(e.Code) + ": " + e.Message }

// Is matches any *Error with the same code, so errors.Is(err,
// ErrInsufficientFunds) works whatever the message.
func (e *Error) Is(target error) bool {
	var t *Error
	return errors.As(target, &t) && t.Code == e.Code
}

// refuse builds an *Error.
func refuse(code Code, format string, args ...any) error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// Sentinels to test refusals with errors.Is.
var (
	ErrInvalidRequest    = &Error{Code: CodeInvalidRequest}
	ErrInvalidStake      = &Error{Code: CodeInvalidStake}
	ErrInsufficientFunds = &Error{Code: CodeInsufficientFunds}
	ErrLimitExceeded     = &Error{Code: CodeLimitExceeded}
	ErrSelfExcluded      = &Error{Code: CodeSelfExcluded}
	ErrBanned            = &Error{Code: CodeBanned}
	ErrNotFound          = &Error{Code: CodeNotFound}
	ErrConflict          = &Error{Code: CodeConflict}
	ErrNoOpenBlock       = &Error{Code: CodeNoOpenBlock}
	ErrPlayFinished      = &Error{Code: CodePlayFinished}
	ErrThrowOutOfTurn    = &Error{Code: CodeThrowOutOfTurn}
	ErrForbidden         = &Error{Code: CodeForbidden}
	ErrSalesSuspended    = &Error{Code: CodeSalesSuspended}
	ErrAccountClosed     = &Error{Code: CodeAccountClosed}
	ErrFourEyes          = &Error{Code: CodeFourEyes}
	ErrAdjustmentExpired = &Error{Code: CodeAdjustmentExpired}
	ErrErasureExpired    = &Error{Code: CodeErasureExpired}
)

// CodeOf returns the code of a refusal, or CodeInternal for any other error.
func CodeOf(err error) Code {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return CodeInternal
}
