package main

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"filippo.io/age"
	"github.com/fdj/tresor/api"
	"github.com/fdj/tresor/settlement"
	"github.com/spf13/cobra"
)

// keyFlags are the flags of the keys a backup carries: the key files, and
// how keys.age is encrypted (backup) or opened (restore).
type keyFlags struct {
	on             bool
	recipients     []string
	passphraseFile string
	identityFile   string
}

// bindKeyFlags adds --keys, the key files and, for a backup, the age
// recipients, for a restore the identity that opens them.
func bindKeyFlags(cmd *cobra.Command, c *Config, k *keyFlags, backup bool) {
	f := cmd.Flags()
	if backup {
		f.BoolVar(&k.on, "keys", false, "also write the master, seal and token keys into keys.age, encrypted with age (--recipient or --passphrase-file)")
		f.StringArrayVar(&k.recipients, "recipient", nil, "age public key (age1...) keys.age is encrypted to; repeat for several holders")
		f.StringVar(&k.passphraseFile, "passphrase-file", "", "file holding the passphrase keys.age is encrypted with, instead of --recipient")
	} else {
		f.BoolVar(&k.on, "keys", false, "also restore the master, seal and token keys from keys.age (--identity or --passphrase-file)")
		f.StringVar(&k.identityFile, "identity", "", "age identity file (AGE-SECRET-KEY-1...) that opens keys.age")
		f.StringVar(&k.passphraseFile, "passphrase-file", "", "file holding the passphrase that opens keys.age, instead of --identity")
	}
	bindKeyFileFlags(cmd, c)
	bindTokenFlag(cmd, c)
}

// validate checks the key flags and fills in the key files' defaults.
func (k *keyFlags) validate(c *Config, backup bool) error {
	for _, kf := range []struct {
		p    *string
		name string
	}{{&c.MasterKeyFile, "master.key"}, {&c.SealKeyFile, "seal.ed25519"}, {&c.TokenKeyFile, "token.key"}} {
		if *kf.p == "" {
			*kf.p = filepath.Join(c.Data, "keys", kf.name)
		}
	}
	sources := len(k.recipients)
	if !backup && k.identityFile != "" {
		sources++
	}
	if k.passphraseFile != "" {
		sources++
	}
	switch {
	case !k.on && sources > 0:
		return usagef("--recipient, --identity and --passphrase-file go with --keys")
	case k.on && backup && sources == 0:
		return usagef("--keys: give --recipient (an age public key) or --passphrase-file: keys are never written in clear")
	case k.on && !backup && sources != 1:
		return usagef("--keys: give one of --identity and --passphrase-file")
	case k.on && backup && k.passphraseFile != "" && len(k.recipients) > 0:
		return usagef("--keys: age encrypts to recipients or to a passphrase, not both")
	}
	return nil
}

// backupKeySet is the clear content of keys.age: each key file's bytes,
// by the name of its role.
type backupKeySet struct {
	Master []byte `json:"master_key"`
	Seal   []byte `json:"seal_key"`
	Token  []byte `json:"token_key,omitempty"`
}

// keyFiles pairs each key of a set with its file and size.
func (s *backupKeySet) keyFiles(c *Config) []struct {
	key  *[]byte
	path string
	size int
} {
	return []struct {
		key  *[]byte
		path string
		size int
	}{{&s.Master, c.MasterKeyFile, settlement.MasterKeySize}, {&s.Seal, c.SealKeyFile, ed25519.SeedSize}, {&s.Token, c.TokenKeyFile, api.TokenKeySize}}
}

// readPassphrase reads a passphrase file, without its final line break.
func readPassphrase(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", usagef("--passphrase-file: %v", err)
	}
	p := strings.TrimRight(string(b), "\r\n")
	if p == "" {
		return "", usagef("--passphrase-file %s: empty", path)
	}
	return p, nil
}

// writeBackupKeys encrypts the key files to the recipients (or the
// passphrase) into keys.age of dir. The master and seal keys must exist;
// the token key is carried when there is one.
func writeBackupKeys(dir string, c *Config, k keyFlags) (*backupKeys, error) {
	var recipients []age.Recipient
	if k.passphraseFile != "" {
		p, err := readPassphrase(k.passphraseFile)
		if err != nil {
			return nil, err
		}
		r, err := age.NewScryptRecipient(p)
		if err != nil {
			return nil, err
		}
		recipients = append(recipients, r)
	} else {
		rs, err := age.ParseRecipients(strings.NewReader(strings.Join(k.recipients, "\n")))
		if err != nil {
			return nil, usagef("--recipient: %v", err)
		}
		recipients = rs
	}
	var set backupKeySet
	for _, kf := range set.keyFiles(c) {
		b, err := loadOrCreateKey(kf.path, kf.size, false)
		if err != nil && (kf.key != &set.Token || !errors.Is(err, os.ErrNotExist)) {
			return nil, fmt.Errorf("back the keys up: %w", err)
		}
		*kf.key = b
	}
	clear, err := json.Marshal(&set)
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	w, err := age.Encrypt(&out, recipients...)
	if err != nil {
		return nil, fmt.Errorf("encrypt the keys: %w", err)
	}
	if _, err := w.Write(clear); err != nil {
		return nil, err
	}
	if err := w.Close(); err != nil {
		return nil, fmt.Errorf("encrypt the keys: %w", err)
	}
	if err := writeFileAtomic(dir, backupKeysFile, out.Bytes()); err != nil {
		return nil, err
	}
	sum := sha256.Sum256(out.Bytes())
	return &backupKeys{File: backupKeysFile, SHA256: hex.EncodeToString(sum[:]), TakenAt: time.Now().UTC()}, nil
}

// openBackupKeys decrypts keys.age with the identity (or passphrase) of k.
func openBackupKeys(dir string, k keyFlags) (*backupKeySet, error) {
	var ids []age.Identity
	if k.passphraseFile != "" {
		p, err := readPassphrase(k.passphraseFile)
		if err != nil {
			return nil, err
		}
		id, err := age.NewScryptIdentity(p)
		if err != nil {
			return nil, err
		}
		ids = append(ids, id)
	} else {
		f, err := os.Open(k.identityFile)
		if err != nil {
			return nil, usagef("--identity: %v", err)
		}
		ids, err = age.ParseIdentities(f)
		f.Close()
		if err != nil {
			return nil, usagef("--identity %s: %v", k.identityFile, err)
		}
	}
	f, err := os.Open(filepath.Join(dir, backupKeysFile))
	if err != nil {
		return nil, fmt.Errorf("open the backup's keys: %w", err)
	}
	defer f.Close()
	r, err := age.Decrypt(f, ids...)
	if err != nil {
		return nil, fmt.Errorf("open the backup's keys with the identity given: %w", err)
	}
	clear, err := io.ReadAll(io.LimitReader(r, 1<<16))
	if err != nil {
		return nil, fmt.Errorf("open the backup's keys: %w", err)
	}
	var set backupKeySet
	if err := json.Unmarshal(clear, &set); err != nil {
		return nil, fmt.Errorf("the backup's keys: %w", err)
	}
	return &set, nil
}

// check refuses a key set whose sizes are wrong.
func (s *backupKeySet) check(c *Config) error {
	for _, kf := range s.keyFiles(c) {
		if n := len(*kf.key); n != kf.size && (n != 0 || kf.key != &s.Token) {
			return fmt.Errorf("the backup's key for %s: %d bytes, want %d", kf.path, n, kf.size)
		}
	}
	return nil
}

// checkSeal refuses a key set whose seal key is not the one that seals
// the restored chain now (pub): the restored writer would refuse it.
func (s *backupKeySet) checkSeal(pub ed25519.PublicKey) error {
	if got := ed25519.NewKeyFromSeed(s.Seal).Public().(ed25519.PublicKey); !got.Equal(pub) {
		return fmt.Errorf("the backup's seal key has public key %s, the seals verify with %s: not this ledger's keys", hex.EncodeToString(got), hex.EncodeToString(pub))
	}
	return nil
}

// write writes each key to its file (mode 0600). An existing file is left
// if it holds the same key and refused otherwise: a restore never
// replaces a key.
func (s *backupKeySet) write(c *Config) error {
	for _, kf := range s.keyFiles(c) {
		if len(*kf.key) == 0 {
			continue
		}
		old, err := os.ReadFile(kf.path)
		if err == nil && !bytes.Equal(old, *kf.key) {
			return fmt.Errorf("key file %s exists and holds another key: a restore never replaces a key", kf.path)
		}
		if err == nil {
			continue
		}
		if err := os.MkdirAll(filepath.Dir(kf.path), 0o700); err != nil {
			return fmt.Errorf("restore the keys: %w", err)
		}
		if err := os.WriteFile(kf.path, *kf.key, 0o600); err != nil {
			return fmt.Errorf("restore the keys: %w", err)
		}
	}
	return nil
}
