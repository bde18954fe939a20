package main

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/fdj/tresor/domain"
	"github.com/fdj/tresor/eventstore"
	"github.com/fdj/tresor/snapshot"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// Config is Tresor's configuration, parsed only here so that no other
// package reads flags or the environment: each setting has a flag and an
// environment variable, and a default that runs the embedded mode.
type Config struct {
	// Data is the data directory: the embedded nats-server's JetStream
	// files and, on first start, the generated keys.
	Data string
	// NATSURL points at an external NATS cluster instead of the embedded
	// server.
	NATSURL string
	// DatabaseURL points the projections at PostgreSQL instead of memory.
	DatabaseURL string
	// HTTP is where the API listens.
	HTTP string
	// MasterKeyFile holds the 32-byte key that seals block seeds; default
	// <data>/keys/master.key, generated on first start.
	MasterKeyFile string
	// MasterKeyNextFile, when the file exists, holds the master key the
	// writer reseals the open blocks' seeds under when it starts; default
	// <data>/keys/master-next.key, never generated.
	MasterKeyNextFile string
	// SealKeyRevoke lists retired seal keys known compromised, as
	// KEYID:POSITION (the first chain position whose seals by the key no
	// longer count), with SealKeyRevokeReason: the writer records each
	// revocation the stream does not hold yet when it starts.
	SealKeyRevoke       []string
	SealKeyRevokeReason string
	// SealKeyFile holds the Ed25519 key that signs Seal events; default
	// <data>/keys/seal.ed25519, generated on first start.
	SealKeyFile string
	// SealKeyNextFile, when the file exists, holds the key the writer
	// rotates the seals to when it starts; default
	// <data>/keys/seal-next.ed25519, never generated.
	SealKeyNextFile string
	// SyncInterval loosens the embedded server's fsync (0: every write is
	// on disk before it is acknowledged, the default).
	SyncInterval time.Duration
	// Replicas is the stream's replica count (1 embedded, 3 in a cluster).
	Replicas int
	// TokenKeyFile holds the 32-byte key that signs API tokens; default
	// <data>/keys/token.key, generated on first start.
	TokenKeyFile string
	// TokenKeyPreviousFile is the token key a rotation replaced, whose
	// tokens verify until TokenKeyPreviousUntil (RFC 3339) (serve).
	TokenKeyPreviousFile  string
	TokenKeyPreviousUntil string
	// TokenIssuer and TokenAudience name the operator's OpenID Connect
	// provider whose tokens serve accepts, and Tresor's audience in them;
	// JWKSURL its key set (found by discovery when empty); TokenRoleClaim
	// and TokenPlayerClaim the claims of the role and the player id.
	TokenIssuer, TokenAudience, JWKSURL string
	TokenRoleClaim, TokenPlayerClaim    string
	// AbandonAfter is how long a play waits for its player before the
	// system completes it.
	AbandonAfter time.Duration
	// SignificantMaxAge is how long the significant-event log keeps an
	// entry.
	SignificantMaxAge time.Duration
	// AccessLogMaxAge is how long the access log keeps an entry.
	AccessLogMaxAge time.Duration
	// SignificantMaxBytes bounds the significant-event log; zero sizes it
	// to the data directory's disk (significantBytes).
	SignificantMaxBytes int64
	// OTLPEndpoint is the OTLP/HTTP collector serve sends its traces to
	// ("" sends none); TraceRatio the share of traces sent (serve).
	OTLPEndpoint string
	TraceRatio   float64 // float-ok: a sampling ratio, not money
	// RevocationSkew is how far a token issuer's clock may be from the
	// writer's: a subject's revocation covers the tokens issued up to that
	// long after it (serve).
	RevocationSkew time.Duration
	// TokenRate and TokenBurst bound one token's requests (serve).
	TokenRate  int
	TokenBurst int
	// VaultCosignatures is the regulator's vault's cosignatures file serve
	// relays, VaultKey the vault's public key the regulator published, and
	// vaultPub that key parsed (serve, docs/vault.md).
	VaultCosignatures, VaultKey string
	vaultPub                    ed25519.PublicKey
	// SettingsFile is the jurisdiction's settings (limits, exclusions) the
	// writer decides under; empty for the embedded default.
	SettingsFile string
	// Snapshots turns on the snapshots of the writer (and of serve's
	// in-memory projections), kept in the stream's snapshot bucket:
	// SnapshotKeep of each, a new one every SnapshotEvery events or
	// SnapshotInterval, and at shutdown (docs/snapshots.md).
	Snapshots        bool
	SnapshotEvery    int
	SnapshotInterval time.Duration
	SnapshotKeep     int
	// NodeName names this serve among the writers of a NATS cluster (the
	// lease holder health shows); default host name and process id.
	NodeName string
	// LeaseTTL is how long the writer lease lives without renewal on a NATS
	// cluster: the bound on a takeover after the writer dies.
	LeaseTTL time.Duration
	// PipelineDepth bounds the committer's atomic batches in flight
	// (eventstore.CommitterConfig.PipelineDepth; 1 waits for each).
	PipelineDepth int
	// BatchEvents bounds the events of one committer batch
	// (eventstore.CommitterConfig.BatchEventsMax).
	BatchEvents int
}

// env names the environment variable of each setting.
var env = map[string]string{
	"data": "TRESOR_DATA", "nats": "TRESOR_NATS_URL", "database-url": "TRESOR_DATABASE_URL", "http": "TRESOR_HTTP",
	"master-key-file": "TRESOR_MASTER_KEY_FILE", "seal-key-file": "TRESOR_SEAL_KEY_FILE",
	"master-key-next-file": "TRESOR_MASTER_KEY_NEXT_FILE", "seal-key-next-file": "TRESOR_SEAL_KEY_NEXT_FILE",
	"sync-interval": "TRESOR_SYNC_INTERVAL", "replicas": "TRESOR_REPLICAS", "abandon-after": "TRESOR_ABANDON_AFTER",
	"token-key-file": "TRESOR_TOKEN_KEY_FILE", "settings": "TRESOR_SETTINGS",
	"snapshots": "TRESOR_SNAPSHOTS", "snapshot-every": "TRESOR_SNAPSHOT_EVERY", "snapshot-interval": "TRESOR_SNAPSHOT_INTERVAL",
	"snapshot-keep": "TRESOR_SNAPSHOT_KEEP",
	"node-name":     "TRESOR_NODE_NAME", "lease-ttl": "TRESOR_LEASE_TTL",
	"pipeline-depth": "TRESOR_PIPELINE_DEPTH", "batch-events": "TRESOR_BATCH_EVENTS",
	"token-rate": "TRESOR_TOKEN_RATE", "token-burst": "TRESOR_TOKEN_BURST", "revocation-clock-skew": "TRESOR_REVOCATION_CLOCK_SKEW",
	"token-issuer": "TRESOR_TOKEN_ISSUER", "token-audience": "TRESOR_TOKEN_AUDIENCE", "jwks-url": "TRESOR_JWKS_URL",
	"token-role-claim": "TRESOR_TOKEN_ROLE_CLAIM", "token-player-claim": "TRESOR_TOKEN_PLAYER_CLAIM",
	"token-key-previous-file": "TRESOR_TOKEN_KEY_PREVIOUS_FILE", "token-key-previous-until": "TRESOR_TOKEN_KEY_PREVIOUS_UNTIL",
	"otlp-endpoint": "TRESOR_OTLP_ENDPOINT", "trace-ratio": "TRESOR_TRACE_RATIO",
	"vault-cosignatures": "TRESOR_VAULT_COSIGNATURES", "vault-key": "TRESOR_VAULT_KEY",
}

// envOr returns the environment variable of a flag, or def. Only redaction
// reads it directly (connectionStrings); flags get their variables from
// applyEnv, once the command line is parsed.
func envOr(flag, def string) string {
	if v, ok := os.LookupEnv(env[flag]); ok {
		return v
	}
	return def
}

// envAnnotation marks a flag that its environment variable (env) sets
// when the command line does not.
const envAnnotation = "tresor-env"

// withEnv ties the flags names of f to their environment variables: a
// command reads the variables of its own flags, and no other.
func withEnv(f *pflag.FlagSet, names ...string) {
	for _, name := range names {
		v, ok := env[name]
		if !ok || f.Lookup(name) == nil {
			panic("withEnv: no flag or variable for " + name) // a programming error, found by any test
		}
		f.SetAnnotation(name, envAnnotation, []string{v})
	}
}

// applyEnv sets each flag of cmd that has an environment variable and was
// not given on the command line from that variable, after parsing: a value
// that does not parse is a usage error naming the variable, and the
// variables of other commands' flags are never read. The flag is not
// marked as changed, so that "given on the command line" keeps its meaning.
func applyEnv(cmd *cobra.Command) error {
	var errs []error
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		name := envName(f)
		if name == "" || f.Changed {
			return
		}
		v, ok := os.LookupEnv(name)
		if !ok {
			return
		}
		if err := f.Value.Set(v); err != nil {
			errs = append(errs, usagef("$%s (--%s): %v", name, f.Name, err))
		}
	})
	return errors.Join(errs...)
}

// envName returns the environment variable of a flag, "" for none.
func envName(f *pflag.Flag) string {
	if v := f.Annotations[envAnnotation]; len(v) == 1 {
		return v[0]
	}
	return ""
}

// showEnvDefaults makes --help show, as a flag's default, the value its
// environment variable gives it (a connection string redacted).
func showEnvDefaults(cmd *cobra.Command) {
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if v, ok := os.LookupEnv(envName(f)); ok && envName(f) != "" {
			f.DefValue = redactURL(v)
		}
	})
}

// withEnvHelp makes root record commandPath and apply the environment
// before any subcommand runs (cobra runs only one persistent pre-run), and
// show the environment's defaults in every help.
func withEnvHelp(root *cobra.Command) {
	root.PersistentPreRunE = func(cmd *cobra.Command, _ []string) error {
		commandPath = cmd.CommandPath()
		return applyEnv(cmd)
	}
	help := root.HelpFunc()
	root.SetHelpFunc(func(cmd *cobra.Command, args []string) {
		showEnvDefaults(cmd)
		help(cmd, args)
	})
}

// bindDataFlag adds the data directory: where the embedded server and the
// keys live.
func bindDataFlag(cmd *cobra.Command, c *Config) {
	cmd.Flags().StringVar(&c.Data, "data", "./tresor-data", "data directory of the embedded server and its keys ($TRESOR_DATA)")
	withEnv(cmd.Flags(), "data")
}

// bindStreamFlags adds the flags that say where the stream lives: all that
// a reader of the stream needs.
func bindStreamFlags(cmd *cobra.Command, c *Config) {
	bindDataFlag(cmd, c)
	connectionFlag(cmd.Flags(), &c.NATSURL, "nats", "URL of an external NATS cluster instead of the embedded server ($TRESOR_NATS_URL; put a password there, not on the command line)")
}

// bindStoreFlags adds the flags that say where the stream lives and how it
// is opened for writing (created if need be): all that a command appending
// to it or following it as a store needs (projections rebuild).
func bindStoreFlags(cmd *cobra.Command, c *Config) {
	bindStreamFlags(cmd, c)
	f := cmd.Flags()
	f.IntVar(&c.Replicas, "replicas", 1, "stream replicas: 1 embedded, 3 in a cluster ($TRESOR_REPLICAS)")
	f.DurationVar(&c.SyncInterval, "sync-interval", 0, "embedded server fsync interval; 0 syncs every write before acknowledging it ($TRESOR_SYNC_INTERVAL)")
	withEnv(f, "replicas", "sync-interval")
}

// bindWriterFlags adds the store's flags and those of the settlement
// writer that runs on it: its keys and the abandoned-play timeout.
func bindWriterFlags(cmd *cobra.Command, c *Config) {
	bindStoreFlags(cmd, c)
	f := cmd.Flags()
	bindKeyFileFlags(cmd, c)
	f.DurationVar(&c.AbandonAfter, "abandon-after", 10*time.Minute, "time after which the system completes a play its player left ($TRESOR_ABANDON_AFTER)")
	// Default 1: on a CPU-bound machine a second batch in flight finds no
	// idle commit time to fill and each smaller batch pays the server's
	// fixed per-batch cost; deeper pipelines are for a machine where the
	// commit's disk wait is the bound.
	f.IntVar(&c.PipelineDepth, "pipeline-depth", 1,
		fmt.Sprintf("atomic batches in flight at once, each fenced on where the previous one ends; 1 waits for each (1..%d; 1 on a replicated stream) ($TRESOR_PIPELINE_DEPTH)", eventstore.PipelineDepthMax))
	// Default 1 000 (nats-server's default max_batch_size): larger batches
	// help short runs, where the server's per-batch cost bounds the rate,
	// but not whole blocks, where the writer's own CPU does; the flag stays
	// for a machine where the per-batch cost is the bound.
	f.IntVar(&c.BatchEvents, "batch-events", eventstore.BatchEventsMax,
		fmt.Sprintf("events in one atomic batch at most, 2..%d; above %d the server's max_batch_size must allow it (the embedded server's does) ($TRESOR_BATCH_EVENTS)",
			eventstore.CommitBatchEventsMax, eventstore.BatchEventsMax))
	withEnv(f, "abandon-after", "pipeline-depth", "batch-events")
	f.StringArrayVar(&c.SealKeyRevoke, "seal-key-revoke", nil, "KEYID:POSITION: a retired seal key known compromised, whose seals from that chain position no longer count; recorded at the writer's start unless the stream holds it (repeatable; docs/security.md)")
	f.StringVar(&c.SealKeyRevokeReason, "seal-key-revoke-reason", "", "why the keys of --seal-key-revoke are revoked (required with it, at most 500 bytes)")
	f.BoolVar(&c.Snapshots, "snapshots", true, "start from the newest verified snapshot and take new ones; false replays the whole stream at every start ($TRESOR_SNAPSHOTS)")
	f.IntVar(&c.SnapshotEvery, "snapshot-every", 250_000, "the writer takes a snapshot after this many new events ($TRESOR_SNAPSHOT_EVERY)")
	f.DurationVar(&c.SnapshotInterval, "snapshot-interval", 10*time.Minute, "the writer and the in-memory read models take a snapshot this long after the last if anything happened ($TRESOR_SNAPSHOT_INTERVAL)")
	f.IntVar(&c.SnapshotKeep, "snapshot-keep", snapshot.KeepDefault, "snapshots of each kind kept in the bucket; older ones are deleted ($TRESOR_SNAPSHOT_KEEP)")
	withEnv(f, "snapshots", "snapshot-every", "snapshot-interval", "snapshot-keep")
	bindSettingsFlag(cmd, c)
}

// bindKeyFileFlags adds the flags of the master and seal key files.
func bindKeyFileFlags(cmd *cobra.Command, c *Config) {
	f := cmd.Flags()
	f.StringVar(&c.MasterKeyFile, "master-key-file", "", "32-byte key sealing block seeds (default <data>/keys/master.key) ($TRESOR_MASTER_KEY_FILE)")
	f.StringVar(&c.MasterKeyNextFile, "master-key-next-file", "", "32-byte master key the writer reseals the seeds of blocks not yet closed under when it starts, if the file exists (default <data>/keys/master-next.key) ($TRESOR_MASTER_KEY_NEXT_FILE)")
	f.StringVar(&c.SealKeyFile, "seal-key-file", "", "Ed25519 key signing Seal events (default <data>/keys/seal.ed25519) ($TRESOR_SEAL_KEY_FILE)")
	f.StringVar(&c.SealKeyNextFile, "seal-key-next-file", "", "Ed25519 key the writer rotates the seals to when it starts, if the file exists (default <data>/keys/seal-next.ed25519) ($TRESOR_SEAL_KEY_NEXT_FILE)")
	withEnv(f, "master-key-file", "master-key-next-file", "seal-key-file", "seal-key-next-file")
}

// validateStore checks the flags of bindStoreFlags.
func (c *Config) validateStore() error {
	if c.Data == "" {
		return usagef("--data: empty data directory")
	}
	if c.Replicas != 1 && c.Replicas != 3 && c.Replicas != 5 {
		return usagef("--replicas %d: want 1, 3 or 5", c.Replicas)
	}
	if c.Replicas != 1 && c.NATSURL == "" {
		// The server would refuse the stream; said here at once, where
		// the opening would try again for its 30 s first.
		return usagef("--replicas %d: the embedded server is one node: want 1, or a cluster's URLs with --nats", c.Replicas)
	}
	if c.SyncInterval < 0 {
		return usagef("--sync-interval %s: negative", c.SyncInterval)
	}
	return nil
}

// bindSettingsFlag adds the flag of the jurisdiction's settings, for the
// commands that run the writer.
func bindSettingsFlag(cmd *cobra.Command, c *Config) {
	cmd.Flags().StringVar(&c.SettingsFile, "settings", "", "jurisdiction settings file (limit periods, raise delay, exclusion terms; default: the embedded domain/jurisdictions/fr-1.json) ($TRESOR_SETTINGS)")
	withEnv(cmd.Flags(), "settings")
}

// settings loads and validates the jurisdiction's settings.
func (c *Config) settings() (*domain.SettingsDocument, error) {
	if c.SettingsFile == "" {
		return domain.DefaultSettings()
	}
	data, err := os.ReadFile(c.SettingsFile)
	if err != nil {
		return nil, usagef("read settings: %v", err)
	}
	doc, err := domain.LoadSettings(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", c.SettingsFile, err)
	}
	return doc, nil
}

// Validate checks the configuration of a writer (bindWriterFlags) and
// fills in derived defaults.
func (c *Config) Validate() error {
	if err := c.validateStore(); err != nil {
		return err
	}
	switch {
	case c.PipelineDepth < 1 || c.PipelineDepth > eventstore.PipelineDepthMax:
		return usagef("--pipeline-depth %d: want 1 to %d", c.PipelineDepth, eventstore.PipelineDepthMax)
	case c.PipelineDepth > 1 && c.Replicas > 1:
		return usagef("--pipeline-depth %d: a replicated stream (--replicas %d) refuses a fenced batch while the one before is replicating: want 1", c.PipelineDepth, c.Replicas)
	case c.BatchEvents < 2 || c.BatchEvents > eventstore.CommitBatchEventsMax:
		return usagef("--batch-events %d: want 2 to %d", c.BatchEvents, eventstore.CommitBatchEventsMax)
	}
	if c.AbandonAfter < time.Second {
		return usagef("--abandon-after %s: at least 1s", c.AbandonAfter)
	}
	switch {
	case c.SnapshotEvery < 1:
		return usagef("--snapshot-every %d: at least 1", c.SnapshotEvery)
	case c.SnapshotInterval < time.Second:
		return usagef("--snapshot-interval %s: at least 1s", c.SnapshotInterval)
	case c.SnapshotKeep < 1:
		return usagef("--snapshot-keep %d: at least 1", c.SnapshotKeep)
	}
	if c.MasterKeyFile == "" {
		c.MasterKeyFile = filepath.Join(c.Data, "keys", "master.key")
	}
	if c.SealKeyFile == "" {
		c.SealKeyFile = filepath.Join(c.Data, "keys", "seal.ed25519")
	}
	if c.MasterKeyNextFile == "" {
		c.MasterKeyNextFile = filepath.Join(c.Data, "keys", "master-next.key")
	}
	if c.SealKeyNextFile == "" {
		c.SealKeyNextFile = filepath.Join(c.Data, "keys", "seal-next.ed25519")
	}
	_, err := c.revocations()
	return err
}

// revocations parses --seal-key-revoke.
func (c *Config) revocations() ([]eventstore.Revocation, error) {
	if len(c.SealKeyRevoke) > 0 && (c.SealKeyRevokeReason == "" || len(c.SealKeyRevokeReason) > eventstore.RevocationReasonMax) {
		return nil, usagef("--seal-key-revoke-reason: 1 to %d bytes, required with --seal-key-revoke", eventstore.RevocationReasonMax)
	}
	var out []eventstore.Revocation
	for _, v := range c.SealKeyRevoke {
		id, pos, _ := strings.Cut(v, ":")
		from, err := strconv.ParseUint(pos, 10, 64)
		if _, herr := hex.DecodeString(id); herr != nil || len(id) != 16 || err != nil || from == 0 {
			return nil, usagef("--seal-key-revoke %q: want KEYID:POSITION, a key id of 16 hex digits and a chain position from 1", v)
		}
		out = append(out, eventstore.Revocation{KeyID: id, FromChainSeq: from, Reason: c.SealKeyRevokeReason})
	}
	return out, nil
}

// loadOrCreateKey reads a key file, or creates it with size random bytes
// (mode 0600) when it does not exist and create is allowed: the embedded
// default makes its own keys on first start; a deployment brings its own.
func loadOrCreateKey(path string, size int, create bool) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err == nil {
		if len(b) != size {
			return nil, fmt.Errorf("key file %s: %d bytes, want %d", path, len(b), size)
		}
		return b, nil
	}
	if !errors.Is(err, os.ErrNotExist) || !create {
		return nil, fmt.Errorf("key file: %w", err)
	}
	b = make([]byte, size)
	if _, err := rand.Read(b); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("key file: %w", err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		return nil, fmt.Errorf("key file: %w", err)
	}
	return b, nil
}

// sealKey returns the Ed25519 key that signs Seal events, made when its
// file does not exist and create is set.
func (c *Config) sealKey(create bool) (ed25519.PrivateKey, error) {
	seed, err := loadOrCreateKey(c.SealKeyFile, ed25519.SeedSize, create)
	if err != nil {
		return nil, err
	}
	return ed25519.NewKeyFromSeed(seed), nil
}

// sealKeyNext returns the key of SealKeyNextFile, nil when there is no
// such file: a rotation is the operator's act of placing one.
func (c *Config) sealKeyNext() (ed25519.PrivateKey, error) {
	if !fileExists(c.SealKeyNextFile) {
		return nil, nil
	}
	seed, err := loadOrCreateKey(c.SealKeyNextFile, ed25519.SeedSize, false)
	if err != nil {
		return nil, err
	}
	return ed25519.NewKeyFromSeed(seed), nil
}

// validateNode checks serve's own flags (cluster, rate) and fills in the
// node's name.
func (c *Config) validateNode() error {
	if c.TraceRatio < 0 || c.TraceRatio > 1 {
		return usagef("--trace-ratio %v: want a share of the traces between 0 and 1", c.TraceRatio)
	}
	if c.TokenRate < 1 || c.TokenBurst < 1 {
		return usagef("--token-rate %d --token-burst %d: want a rate of at least 1 and a burst of at least 1", c.TokenRate, c.TokenBurst)
	}
	if c.RevocationSkew < 0 || c.RevocationSkew > time.Hour {
		return usagef("--revocation-clock-skew %s: want 0 to 1h", c.RevocationSkew)
	}
	if err := c.validateIdentity(); err != nil {
		return err
	}
	if c.LeaseTTL < time.Second {
		return usagef("--lease-ttl %s: at least 1s", c.LeaseTTL)
	}
	if (c.VaultCosignatures == "") != (c.VaultKey == "") {
		return usagef("--vault-cosignatures and --vault-key: give both, the vault's cosignatures file and its public key")
	}
	if c.VaultKey != "" {
		pub, err := parsePublicKey(c.VaultKey)
		if err != nil {
			return usagef("--vault-key: %v", err)
		}
		c.vaultPub = pub
	}
	if c.NodeName == "" {
		host, err := os.Hostname()
		if err != nil {
			host = "tresor"
		}
		c.NodeName = fmt.Sprintf("%s/%d", host, os.Getpid())
	}
	return nil
}
