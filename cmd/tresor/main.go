// Command tresor is the one binary of Tresor, the event-sourced ledger and
// settlement system of « L'île au trésor »: serve, simulate, audit, export,
// verify-play, deck, rules, migrate, token and projections, as subcommands.
package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"
)

// exitUsage is the exit status for bad flags or malformed input.
const exitUsage = 2

// usageError marks an error caused by the caller's input: it exits with
// status 2 instead of 1.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

// usagef builds a usageError.
func usagef(format string, args ...any) error {
	return usageError{fmt.Errorf(format, args...)}
}

// newRootCmd is the tresor command and its subcommands, each built by a
// function of its own file: nothing registers itself from an init, so that
// what the binary runs is read here.
func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:           "tresor",
		Short:         "Event-sourced ledger and settlement for « L'île au trésor »",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	withEnvHelp(root)
	root.AddCommand(newServeCmd(), newSimulateCmd(), newAuditCmd(), newExportCmd(), newVerifyPlayCmd(), newDeckCmd(),
		newRulesCmd(), newSettingsCmd(), newMigrateCmd(), newTokenCmd(), newSealKeyCmd(), newProjectionsCmd(),
		newReportCmd(), newFeedCmd(), newBackupCmd(), newRestoreCmd(), newVaultCmd(), newEraseCmd(), newRetentionCmd())
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	return root
}

// commandPath is the subcommand running ("tresor serve"): the lock of an
// embedded data directory names it, so that a second process refused the
// directory says who holds it. Flags are left out: they may carry secrets.
var commandPath = "tresor"

func main() {
	if cmd, err := newRootCmd().ExecuteC(); err != nil {
		fmt.Fprintln(os.Stderr, "tresor:", redactErr(err, connectionStrings(cmd)...))
		var ue usageError
		if errors.As(err, &ue) {
			os.Exit(exitUsage)
		}
		os.Exit(1)
	}
}
