package eventstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// ReaderAccess is what a read-only NATS user may do with Tresor's stream:
// what tresor export, tresor audit and tresor projections rebuild need
// (look the stream up, run ordered consumers on it), nothing more. It is
// defined once, here: the embedded server gives it to the read-only user it
// advertises (EmbeddedConfig.Readers), and docs/export.md shows it as the
// nats-server configuration of a regulator's user (RegulatorConf), which a
// test keeps equal to this definition.
//
// The reader lives in an account of its own that imports only the
// JetStream API subjects below from the stream's account. Permissions alone
// cannot keep the stream inside an account: nats-server (2.15) does not
// check a push consumer's deliver subject against its creator's
// permissions, and it sends the messages a pull request or a direct get
// asks for to whatever reply subject the requester names. Across an account
// boundary, replies come back to the reader's own account, and a push
// consumer can deliver only inside the stream's account, whose users are
// Tresor's own.
type ReaderAccess struct {
	// Stream is the stream's name (default "TRESOR", as Config.Stream).
	Stream string
	// SubjectPrefix is the stream's subject prefix (default "tresor").
	SubjectPrefix string
	// InboxPrefix is the only prefix the reader may subscribe under: its
	// clients' reply subjects (default "_INBOX_reader").
	InboxPrefix string
	// SnapshotBucket is the Object Store bucket of the snapshots beside
	// the stream (default SnapshotBucketDefault), which the reader may
	// read too: a snapshot summarises the stream it already reads (it
	// never holds a seed), and a backup carries the newest ones so that
	// a restored ledger starts from them.
	SnapshotBucket string
	// dataKeys adds the bucket of wrapped data keys (DataKeysBucket)
	// and the bounded logs (SignificantStream, AccessLogStream), read
	// only: the embedded server's keeper (keeper), never a regulator's
	// user (RegulatorConf), which has no business with personal data keys
	// and reads the logs through the API.
	dataKeys bool
}

// keeper is a's access for the embedded server's keeper: the reader's,
// and the data keys bucket, read only, so that tresor backup beside a
// running serve carries the data keys. The keeper's password is
// advertised in the data directory like the reader's (mode 0600): whoever
// reads it can read the bucket's files, and the master key, anyway.
func (a ReaderAccess) keeper() ReaderAccess {
	a.dataKeys = true
	return a
}

// SnapshotBucketDefault is the default ReaderAccess.SnapshotBucket, the
// snapshot package's default bucket.
const SnapshotBucketDefault = "TRESOR_SNAPSHOTS"

// readerUser is the read-only user of the embedded server; writerUser is
// the embedded server's own in-process user.
const (
	readerUser        = "reader"
	keeperUser        = "keeper"
	writerUser        = "tresor"
	readerAccountName = "TRESOR_READER"
	keeperAccountName = "TRESOR_KEEPER"
)

// readerImport is one subject of the stream's account that the reader's
// account imports.
type readerImport struct {
	subject string
	// streamed: the service answers one request with many messages.
	streamed bool
	// publish: the reader may send to it. $JS.API.INFO is imported only
	// so that nats-server does not answer JetStream requests in the
	// reader's account itself (it adds such a responder to every account
	// without JetStream unless an import covers $JS.API.INFO): two
	// responders would race for each answer. Its answer, the account's
	// usage, is not the reader's business.
	publish bool
}

func (a ReaderAccess) withDefaults() ReaderAccess {
	if a.Stream == "" {
		a.Stream = "TRESOR"
	}
	if a.SubjectPrefix == "" {
		a.SubjectPrefix = defaultSubjectPrefix
	}
	if a.InboxPrefix == "" {
		a.InboxPrefix = "_INBOX_reader"
	}
	if a.SnapshotBucket == "" {
		a.SnapshotBucket = SnapshotBucketDefault
	}
	return a
}

// imports lists the JetStream API subjects the reader's account imports.
func (a ReaderAccess) imports() []readerImport {
	a = a.withDefaults()
	snapshots := "OBJ_" + a.SnapshotBucket // the Object Store's name for its stream
	imports := []readerImport{
		{subject: "$JS.API.INFO"},
		// The stream's configuration and last sequence: opening checks
		// that the stream cannot lose events; an export stops at the end.
		{subject: "$JS.API.STREAM.INFO." + a.Stream, publish: true},
		// Ordered consumers: ephemeral, unacknowledged pull consumers the
		// client creates, and re-creates after a gap; the tokens after the
		// stream are the consumer's name and an optional filter.
		{subject: "$JS.API.CONSUMER.CREATE." + a.Stream + ".>", publish: true},
		// The pull requests, each answered with up to a batch of messages.
		{subject: "$JS.API.CONSUMER.MSG.NEXT." + a.Stream + ".>", streamed: true, publish: true},
		// The snapshot bucket's stream, read the same way, and the last
		// description of an object, got directly by its subject.
		{subject: "$JS.API.STREAM.INFO." + snapshots, publish: true},
		{subject: "$JS.API.DIRECT.GET." + snapshots + ".>", publish: true},
		{subject: "$JS.API.CONSUMER.CREATE." + snapshots + ".>", publish: true},
		{subject: "$JS.API.CONSUMER.MSG.NEXT." + snapshots + ".>", streamed: true, publish: true},
	}
	if a.dataKeys {
		// The data keys bucket, and the bounded logs, which a backup
		// carries too (their entries hold sealed staff subjects and
		// requesters' addresses: the operator's, not a regulator's user's).
		for _, s := range []string{"KV_" + DataKeysBucket, SignificantStream, AccessLogStream} {
			imports = append(imports,
				readerImport{subject: "$JS.API.STREAM.INFO." + s, publish: true},
				readerImport{subject: "$JS.API.CONSUMER.CREATE." + s + ".>", publish: true},
				readerImport{subject: "$JS.API.CONSUMER.MSG.NEXT." + s + ".>", streamed: true, publish: true})
		}
	}
	return imports
}

// denied restates what matters most, for nats-server's deny list, which
// wins over any allow added later: no publishing into the stream or the
// snapshot bucket, no creating, changing, deleting or purging a stream, no
// deleting a message or a consumer.
func (a ReaderAccess) denied() []string {
	a = a.withDefaults()
	denied := []string{
		a.SubjectPrefix + ".>",
		"$O." + a.SnapshotBucket + ".>",
		"$JS.API.STREAM.CREATE.>",
		"$JS.API.STREAM.UPDATE.>",
		"$JS.API.STREAM.DELETE.>",
		"$JS.API.STREAM.PURGE.>",
		"$JS.API.STREAM.MSG.DELETE.>",
		"$JS.API.CONSUMER.DELETE.>",
	}
	if a.dataKeys {
		denied = append(denied, "$KV."+DataKeysBucket+".>", SignificantSubjectPrefix+".>", AccessLogSubjectPrefix+".>")
	}
	return denied
}

// permissions are the reader user's permissions.
func (a ReaderAccess) permissions() *server.Permissions {
	a = a.withDefaults()
	var allow []string
	for _, im := range a.imports() {
		if im.publish {
			allow = append(allow, im.subject)
		}
	}
	return &server.Permissions{
		Publish:   &server.SubjectPermission{Allow: allow, Deny: a.denied()},
		Subscribe: &server.SubjectPermission{Allow: []string{a.InboxPrefix + ".>"}},
	}
}

// accounts builds the stream's account (the global one, where the
// embedded server has always kept the stream) exporting to the reader's
// account and the keeper's the subjects each imports.
func (a ReaderAccess) accounts() (stream, reader, keeper *server.Account, err error) {
	stream = server.NewAccount(server.DEFAULT_GLOBAL_ACCOUNT)
	reader, keeper = server.NewAccount(readerAccountName), server.NewAccount(keeperAccountName)
	readers := map[string]bool{}
	for _, im := range a.imports() {
		readers[im.subject] = true
	}
	// The keeper imports what the reader does and the data keys bucket.
	for _, im := range a.keeper().imports() {
		resp := server.Singleton
		if im.streamed {
			resp = server.Streamed
		}
		to := []*server.Account{keeper}
		if readers[im.subject] {
			to = append(to, reader)
		}
		if err := stream.AddServiceExportWithResponse(im.subject, resp, to); err != nil {
			return nil, nil, nil, fmt.Errorf("export %s to the readers: %w", im.subject, err)
		}
		for _, acc := range to {
			if err := acc.AddServiceImport(stream, im.subject, ""); err != nil {
				return nil, nil, nil, fmt.Errorf("import %s for %s: %w", im.subject, acc.Name, err)
			}
		}
	}
	return stream, reader, keeper, nil
}

// RegulatorConf is ReaderAccess as a nats-server configuration block: an
// account TRESOR for Tresor's own user (tresor) and an account REGULATOR
// for the read-only user (regulator), their passwords taken from the
// server's environment ($TRESOR_NATS_PASSWORD, $REGULATOR_NATS_PASSWORD).
// docs/export.md shows it for the default stream and the inbox prefix
// _INBOX_regulator.
func RegulatorConf(a ReaderAccess) string {
	a = a.withDefaults()
	quoted := func(subjects []string) string {
		q := make([]string, len(subjects))
		for i, s := range subjects {
			q[i] = fmt.Sprintf("%q", s)
		}
		return strings.Join(q, "\n            ")
	}
	var exports, imports strings.Builder
	for _, im := range a.imports() {
		resp := ""
		if im.streamed {
			resp = ", response_type: stream"
		}
		fmt.Fprintf(&exports, "      {service: %q, accounts: [REGULATOR]%s}\n", im.subject, resp)
		fmt.Fprintf(&imports, "      {service: {account: TRESOR, subject: %q}}\n", im.subject)
	}
	p := a.permissions()
	return fmt.Sprintf(`accounts {
  TRESOR {
    jetstream: enabled
    users = [
      {user: tresor, password: $TRESOR_NATS_PASSWORD}
    ]
    exports = [
%s    ]
  }
  REGULATOR {
    users = [
      {user: regulator, password: $REGULATOR_NATS_PASSWORD, permissions: {
        publish = {
          allow = [
            %s
          ]
          deny = [
            %s
          ]
        }
        subscribe = {
          allow = [%q]
        }
      }}
    ]
    imports = [
%s    ]
  }
}
`, exports.String(), quoted(p.Publish.Allow), quoted(p.Publish.Deny), p.Subscribe.Allow[0], imports.String())
}

// readerAdvertName is the file in which the holder of a data directory
// advertises its read-only listener (mode 0600: it holds a password).
const readerAdvertName = "tresor-reader.json"

// readerAdvert is the content of the advertisement.
type readerAdvert struct {
	URL         string `json:"url"`
	User        string `json:"user"`
	Password    string `json:"password"`
	InboxPrefix string `json:"inbox_prefix"`
	// KeeperUser and KeeperPassword are the keeper's (ReaderAccess's
	// keeper), absent from an older holder's advertisement.
	KeeperUser     string `json:"keeper_user,omitempty"`
	KeeperPassword string `json:"keeper_password,omitempty"`
	// Instance is the holder's (Holder.Instance): an advertisement counts
	// only while the lock file names the same holding.
	Instance string `json:"instance"`
}

// advertise writes the advertisement whole (a temporary file renamed), so
// that a reader never sees half of it.
func advertise(dir string, ad readerAdvert) error {
	b, err := json.Marshal(ad)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, readerAdvertName+".*")
	if err != nil {
		return fmt.Errorf("advertise the reader listener: %w", err)
	}
	defer os.Remove(tmp.Name()) // a no-op once renamed
	// CreateTemp makes the file 0600: only the directory's owner reads
	// the password.
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return fmt.Errorf("advertise the reader listener: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("advertise the reader listener: %w", err)
	}
	if err := os.Rename(tmp.Name(), filepath.Join(dir, readerAdvertName)); err != nil {
		return fmt.Errorf("advertise the reader listener: %w", err)
	}
	return nil
}

// readAdvert reads dir's advertisement.
func readAdvert(dir string) (readerAdvert, error) {
	var ad readerAdvert
	f, err := os.Open(filepath.Join(dir, readerAdvertName))
	if err != nil {
		return ad, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, holderBytesMax))
	if err != nil {
		return ad, err
	}
	return ad, json.Unmarshal(b, &ad)
}

// randomPassword is 32 random bytes in hex.
func randomPassword() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("generate a password: %w", err)
	}
	return hex.EncodeToString(b), nil
}

// Limits of joining another process's server.
const (
	// advertWaitMax bounds the wait for the holder of a data directory to
	// advertise its listener: it does so once its server is ready, within
	// EmbeddedConfig.StartTimeout (default 10s).
	advertWaitMax = 15 * time.Second
	// advertPoll is how often the advertisement is looked for meanwhile.
	advertPoll = 50 * time.Millisecond
	// joinAttemptsMax bounds RunOrJoin's rounds: each one is a lock
	// attempt and, the lock being held, a connection to its holder; a
	// round fails only when the holder exits in between.
	joinAttemptsMax = 5
)

// errHolderGone says that the process named by a lock file has ended: the
// lock is free again, or about to be.
var errHolderGone = errors.New("the holder of the data directory has exited")

// dialReader connects, as the read-only user (the keeper when keeper is
// set and the holder advertises one), to the server of the process
// holding dir, through the listener it advertises there. The
// caller has just failed to take the lock, so the directory is held; the
// advertisement is used only when it names the holding the lock file
// describes, never on its presence alone: one left behind by a holder
// killed with SIGKILL is ignored. It waits up to advertWaitMax for a
// holder still starting, and returns errHolderGone when the holder has
// exited (the caller then takes the lock).
func dialReader(ctx context.Context, dir string, keeper bool, opts ...nats.Option) (*nats.Conn, error) {
	deadline := time.Now().Add(advertWaitMax)
	for {
		h, err := readHolder(dir)
		if err != nil {
			return nil, err
		}
		if h.gone() {
			return nil, errHolderGone
		}
		ad, err := readAdvert(dir)
		if err == nil && h.Instance != "" && ad.Instance == h.Instance {
			user, password := ad.User, ad.Password
			if keeper && ad.KeeperUser != "" {
				user, password = ad.KeeperUser, ad.KeeperPassword
			}
			opts = append(opts, nats.Name("tresor-reader"), nats.UserInfo(user, password), nats.CustomInboxPrefix(ad.InboxPrefix))
			nc, err := nats.Connect(ad.URL, opts...)
			if err != nil {
				// The holder may have exited since: its listener is
				// closed. The caller's next round tells.
				return nil, fmt.Errorf("connect to the reader listener of %s (%s): %w: %w", dir, h, err, errHolderGone)
			}
			return nc, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%w, which advertises no read-only listener", &LockedError{Dir: dir, Holder: h})
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(advertPoll):
		}
	}
}

// RunOrJoin opens cfg.DataDir for a reader, never starting a second server
// on a directory in use: when the directory is free, it runs an embedded
// server on it (RunEmbedded; cfg.Readers lets later readers join) and
// returns it with an in-process connection; when another process holds the
// directory, it returns no server and a connection to that process's
// server as its read-only user (ReaderAccess), through the listener the
// holder advertises. opts apply to that connection. It returns a
// *LockedError when the holder advertises no listener (it runs without
// EmbeddedConfig.Readers, or an older Tresor).
func RunOrJoin(ctx context.Context, cfg EmbeddedConfig, opts ...nats.Option) (*EmbeddedServer, *nats.Conn, error) {
	var err error
	for range joinAttemptsMax {
		var srv *EmbeddedServer
		srv, err = RunEmbedded(cfg)
		if err == nil {
			nc, err := srv.Conn()
			if err != nil {
				srv.Shutdown()
				return nil, nil, err
			}
			return srv, nc, nil
		}
		if !errors.Is(err, ErrLocked) {
			return nil, nil, err
		}
		var nc *nats.Conn
		nc, err = dialReader(ctx, cfg.DataDir, cfg.Keeper, opts...)
		if err == nil {
			return nil, nc, nil
		}
		if !errors.Is(err, errHolderGone) {
			return nil, nil, err
		}
	}
	return nil, nil, fmt.Errorf("open %s for reading: %d attempts: %w", cfg.DataDir, joinAttemptsMax, err)
}
