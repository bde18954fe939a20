// Package audit verifies a Tresor event stream independently of the
// operator's servers and databases, as a regulator does: it is fed the
// recorded events in stream order (from a live stream or an NDJSON export)
// and re-derives everything from them alone, reporting each violation with
// a stable code, the stream sequence, and what was expected versus found.
//
// It checks the hash chain of every chain and every seal's Ed25519
// signature (eventstore.Verifier); each block's commitment, and for a
// closed block that the revealed seed rebuilds the committed deck and every
// sold unit's tier and salt; that units are assigned once, in deck order,
// from an open block of the stake's price; that every play is one stake,
// four throws that show exactly the unit's scenario, one settlement at the
// Article 4.5 prize of its tier, and that prize paid once; balances (never
// negative, balance_after as recorded, debits equal credits, deposits −
// withdrawals − stakes + prizes); and each sold-out block's Article 3 tier
// counts and prize total. docs/audit.md lists the checks and codes.
//
// The auditor does not use domain.Ledger.Evolve, which trusts the events it
// applies: it keeps its own state, tolerant of any input, and reuses only
// the domain's pure functions (BuildDeck, VerifyUnitProof,
// GenerateScenario, ValidateScenario, Books). Pure checks (proofs,
// scenarios, deck rebuilds) and payload decoding run on every core; the
// checks that depend on order run on one goroutine, in stream order.
package audit
