package main

import (
	"crypto/ed25519"
	"encoding/hex"
	"fmt"
	"path/filepath"

	"github.com/fdj/tresor/eventstore"
	"github.com/spf13/cobra"
)

// newSealKeyCmd is the tresor seal-key command.
func newSealKeyCmd() *cobra.Command {
	var cfg Config
	cmd := &cobra.Command{
		Use:   "seal-key [--data DIR | --seal-key-file FILE]",
		Short: "Print the public key that verifies the seals, for regulators' tresor audit --public-key",
		Long: "seal-key prints the Ed25519 public key of the seal key file (64 hex digits) on the first line\n" +
			"and its key id (the key_id of every Seal event) on the second. It never creates a key.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cfg.SealKeyFile == "" {
				cfg.SealKeyFile = filepath.Join(cfg.Data, "keys", "seal.ed25519")
			}
			seed, err := loadOrCreateKey(cfg.SealKeyFile, ed25519.SeedSize, false)
			if err != nil {
				return usagef("--seal-key-file: %v", err)
			}
			pub := ed25519.NewKeyFromSeed(seed).Public().(ed25519.PublicKey)
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "%s\nkey_id %s\n", hex.EncodeToString(pub), eventstore.KeyID(pub))
			return err
		},
	}
	bindDataFlag(cmd, &cfg)
	cmd.Flags().StringVar(&cfg.SealKeyFile, "seal-key-file", "", "Ed25519 key signing Seal events (default <data>/keys/seal.ed25519) ($TRESOR_SEAL_KEY_FILE)")
	withEnv(cmd.Flags(), "seal-key-file")
	return cmd
}
