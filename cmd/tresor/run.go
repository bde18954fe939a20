package main

import (
	"context"
	"io"
	"os"
	"os/signal"
	"runtime/pprof"
	"syscall"

	"github.com/spf13/cobra"
)

// runProfiled runs fn with a context that SIGINT and SIGTERM cancel, under
// a CPU profile written to path (none when path is empty): the long
// commands (simulate, audit) are the ones worth profiling.
func runProfiled(cmd *cobra.Command, path string, fn func(ctx context.Context) error) error {
	if path != "" {
		f, err := os.Create(path)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return fn(ctx)
}

// printer is a report with a form for people.
type printer interface{ print(w io.Writer) error }

// writeReport writes rep on cmd's stdout, as one JSON object or for people.
func writeReport(cmd *cobra.Command, asJSON bool, rep printer) error {
	if asJSON {
		return writeJSON(cmd.OutOrStdout(), rep)
	}
	return rep.print(cmd.OutOrStdout())
}
