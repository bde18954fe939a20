package main

import (
	"crypto/ed25519"
	"encoding/hex"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fdj/tresor/api"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// TestTokenNeverCreatesAKey runs `tresor token` where there is no key, as
// a newcomer in the wrong directory would: it refuses, naming the missing
// file, and creates nothing; serve still makes the key on its first start.
func TestTokenNeverCreatesAKey(t *testing.T) {
	t.Parallel()
	data := t.TempDir()
	want := filepath.Join(data, "keys", "token.key")
	stdout, stderr, code := run(t, "token", "--data", data, "--role", "operator")
	if code != exitUsage || stdout != "" || !strings.Contains(stderr, want) {
		t.Fatalf("token without a key: exit %d, stdout %q, stderr %q; want %d naming %s", code, stdout, stderr, exitUsage, want)
	}
	if _, err := os.Stat(filepath.Join(data, "keys")); !os.IsNotExist(err) {
		t.Fatalf("token created %s: %v", filepath.Join(data, "keys"), err)
	}
	other := filepath.Join(t.TempDir(), "token.key")
	if _, stderr, code := run(t, "token", "--token-key-file", other, "--role", "operator"); code != exitUsage || !strings.Contains(stderr, other) {
		t.Fatalf("token --token-key-file without the file: exit %d, %s", code, stderr)
	}
	s := startServe(t, data)
	if _, err := os.Stat(want); err != nil {
		t.Fatalf("serve did not create the token key: %v", err)
	}
	s.must(200, call{"GET", "/v1/blocks", s.token("operator", ""), "", ""})
	s.stop()
}

// TestTokenURLCarriesTheTokenInTheFragment: --url prints the page of the
// role with the token after '#', which browsers never send to a server.
func TestTokenURLCarriesTheTokenInTheFragment(t *testing.T) {
	t.Parallel()
	data := t.TempDir()
	key := writeKey(t, api.TokenKeySize)
	for _, tc := range []struct{ role, player, page string }{
		{"player", "p-1", "/play"}, {"operator", "", "/console"}, {"regulator", "", "/console"},
	} {
		args := []string{"token", "--data", data, "--token-key-file", key, "--role", tc.role, "--url", "http://127.0.0.1:8080/"}
		if tc.player != "" {
			args = append(args, "--player", tc.player)
		}
		out, stderr, code := run(t, args...)
		link, tok, ok := strings.Cut(strings.TrimSpace(out), "#token=")
		if code != 0 || !ok || link != "http://127.0.0.1:8080"+tc.page {
			t.Fatalf("token --url for %s: exit %d, %q %s", tc.role, code, out, stderr)
		}
		tokens, err := api.NewTokens(mustRead(t, key))
		if err != nil {
			t.Fatal(err)
		}
		if c, err := tokens.Verify(tok); err != nil || string(c.Role) != tc.role || c.Player != tc.player {
			t.Fatalf("the link's token: %+v %v", c, err)
		}
	}
	for _, bad := range []string{"127.0.0.1:8080", "ftp://x", "http://h/#a", "http://h/?token=x", "http://"} {
		if _, _, code := run(t, "token", "--token-key-file", key, "--role", "operator", "--url", bad); code != exitUsage {
			t.Errorf("--url %q: exit %d, want %d", bad, code, exitUsage)
		}
	}
}

// TestEachCommandReadsOnlyTheVariablesOfItsOwnFlags sets every variable of
// env to a value no flag takes, then applies the environment to every
// command: each refuses exactly the variables of its own flags that must
// parse (numbers, durations), naming them, and reads no other.
func TestEachCommandReadsOnlyTheVariablesOfItsOwnFlags(t *testing.T) {
	for _, v := range env {
		t.Setenv(v, "not-a-value")
	}
	named := regexp.MustCompile(`\$(TRESOR_[A-Z_]+)`)
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		for _, sub := range c.Commands() {
			walk(sub)
		}
		if !c.Runnable() {
			return
		}
		var own, mustFail []string
		c.Flags().VisitAll(func(f *pflag.Flag) {
			if v := envName(f); v != "" {
				own = append(own, v)
				if f.Value.Type() != "string" {
					mustFail = append(mustFail, v)
				}
			}
		})
		var got []string
		if err := applyEnv(c); err != nil {
			for _, m := range named.FindAllStringSubmatch(err.Error(), -1) {
				got = append(got, m[1])
			}
		}
		slices.Sort(got)
		slices.Sort(mustFail)
		if !slices.Equal(got, mustFail) {
			t.Errorf("%s: the environment's errors name %v, want %v (its own variables: %v)", c.CommandPath(), got, mustFail, own)
		}
	}
	walk(newRootCmd())
}

// TestCommandsShowOnlyTheirOwnFlags: a command does not offer the flags of
// a writer it does not run, and does not fail on their variables.
func TestCommandsShowOnlyTheirOwnFlags(t *testing.T) {
	writer := []string{"--abandon-after", "--master-key-file", "--seal-key-file", "--sync-interval", "--replicas", "--nats"}
	for _, tc := range []struct {
		cmd    []string
		absent []string
	}{
		{[]string{"token"}, writer},
		{[]string{"seal-key"}, []string{"--abandon-after", "--master-key-file", "--replicas", "--token-key-file"}},
		{[]string{"projections", "rebuild"}, []string{"--abandon-after", "--master-key-file", "--seal-key-file", "--token-key-file"}},
		{[]string{"audit"}, []string{"--abandon-after", "--master-key-file", "--replicas", "--token-key-file"}},
		{[]string{"export"}, []string{"--abandon-after", "--master-key-file", "--replicas", "--token-key-file"}},
	} {
		help, stderr, code := run(t, append(tc.cmd, "--help")...)
		if code != 0 {
			t.Fatalf("%v --help: exit %d %s", tc.cmd, code, stderr)
		}
		for _, f := range tc.absent {
			if strings.Contains(help, f+" ") {
				t.Errorf("tresor %s --help offers %s", strings.Join(tc.cmd, " "), f)
			}
		}
	}
	// The newcomer's case: a writer's variable set in the shell.
	key := writeKey(t, api.TokenKeySize)
	t.Setenv("TRESOR_ABANDON_AFTER", "10")
	t.Setenv("TRESOR_REPLICAS", "two")
	t.Setenv("TRESOR_SYNC_INTERVAL", "often")
	if out, stderr, code := run(t, "token", "--token-key-file", key, "--role", "operator"); code != 0 || strings.Count(out, ".") != 2 {
		t.Fatalf("token with a writer's variables set: exit %d %q %s", code, out, stderr)
	}
	// A command whose own variable does not parse says which.
	_, stderr, code := run(t, "simulate", "--data", t.TempDir(), "--plays", "1", "--players", "1", "--quiet")
	if code != exitUsage || !strings.Contains(stderr, "TRESOR_ABANDON_AFTER") {
		t.Fatalf("simulate with TRESOR_ABANDON_AFTER=10: exit %d, %s; want %d naming the variable", code, stderr, exitUsage)
	}
}

// TestSealKeyOutputIsAnAuditPublicKeyFile: what seal-key prints, saved as
// is, is a file that audit --public-key takes.
func TestSealKeyOutputIsAnAuditPublicKeyFile(t *testing.T) {
	t.Parallel()
	data := simulateStream(t, "20")
	out, stderr, code := run(t, "seal-key", "--data", data)
	if code != 0 {
		t.Fatalf("seal-key: exit %d %s", code, stderr)
	}
	file := filepath.Join(t.TempDir(), "seal.pub")
	if err := os.WriteFile(file, []byte(out), 0o644); err != nil {
		t.Fatal(err)
	}
	keys := filepath.Join(data, "keys")
	moved := filepath.Join(t.TempDir(), "keys")
	// Without the private key beside the stream, audit has only the file.
	if err := os.Rename(keys, moved); err != nil {
		t.Fatal(err)
	}
	if _, stderr, code := run(t, "audit", "--data", data, "--public-key", file, "--quiet"); code != 0 {
		t.Fatalf("audit --public-key <seal-key's output>: exit %d %s", code, stderr)
	}
}

// TestPortInUseExitsWithStatus1: serve on an address another process holds
// exits 1 (not the usage status 2) with a message naming the address.
func TestPortInUseExitsWithStatus1(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	addr := ln.Addr().String()
	done := make(chan struct{})
	var stderr string
	var code int
	go func() {
		defer close(done)
		_, stderr, code = run(t, "serve", "--data", t.TempDir(), "--http", addr)
	}()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("serve on a port in use still running after 60s")
	}
	if code != 1 || !strings.Contains(stderr, addr) || !strings.Contains(stderr, "address already in use") {
		t.Fatalf("serve on a port in use: exit %d, %q", code, stderr)
	}
}

// TestDocsStayInTheRepository: the docs name no file outside the
// repository (a reader of the repository alone must be able to follow
// every reference).
func TestDocsStayInTheRepository(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("../../docs/*.md")
	if err != nil || len(files) == 0 {
		t.Fatalf("docs: %v %v", files, err)
	}
	files = append(files, "../../README.md")
	outside := regexp.MustCompile(`(^|[^.])\.\./[A-Za-z]|/work/|shared/design\.md`)
	for _, f := range files {
		for i, line := range strings.Split(string(mustRead(t, f)), "\n") {
			if outside.MatchString(line) {
				t.Errorf("%s:%d names a file outside the repository: %s", f, i+1, line)
			}
		}
	}
}

// TestReadmeSaysHowLongTheTestsTake: the quick start says how long
// `make test` takes and offers the short run.
func TestReadmeSaysHowLongTheTestsTake(t *testing.T) {
	t.Parallel()
	readme := string(mustRead(t, "../../README.md"))
	for _, want := range []string{"make test-short", "minutes"} {
		if !strings.Contains(readme, want) {
			t.Errorf("README does not mention %q", want)
		}
	}
}

// A --public-key file whose path is 64 characters long, as many as the
// key's hex digits, is read as a file.
func TestPublicKeyFileOfAPathAsLongAsAKey(t *testing.T) {
	t.Parallel()
	pub := sealPublicKey(t, writeKey(t, ed25519.SeedSize))
	// A short directory of its own: t.TempDir's name may be too long.
	dir, err := os.MkdirTemp("", "k")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	const name = "seal.pub"
	path := dir + strings.Repeat("/", 2*ed25519.PublicKeySize-len(dir)-len(name)) + name
	if err := os.WriteFile(path, []byte(hex.EncodeToString(pub)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := parsePublicKey(path)
	if err != nil || !got.Equal(pub) {
		t.Fatalf("--public-key %s (%d characters): %x, %v; want the file's key", path, len(path), got, err)
	}
}
