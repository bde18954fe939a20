package eventstore

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// Minimum nats-server version: atomic batch publish appeared in 2.12.
const (
	serverMajorMin = 2
	serverMinorMin = 12
)

// EmbeddedConfig configures an in-process nats-server. The zero value of
// every field but DataDir is the safe default.
type EmbeddedConfig struct {
	// DataDir is where JetStream keeps its files. Required. The server
	// holds an exclusive lock on it for as long as it runs (below).
	DataDir string
	// Holder says what runs the server ("tresor serve"), for the lock
	// file: a second process refused the directory names it (default: the
	// program's name).
	Holder string
	// Readers, when not nil, opens a client listener on 127.0.0.1 (a free
	// port) for a read-only user with this access, and advertises it in
	// DataDir, so that the read-only commands read a live stream through
	// this server instead of starting a second one on its files
	// (RunOrJoin). The server then requires authentication from every
	// client: Conn's in-process connection uses a user that may connect
	// in-process only, with a password that never leaves the process. Not
	// with ListenAddr or Cluster.
	Readers *ReaderAccess
	// Keeper makes RunOrJoin join another process's server as its keeper,
	// which reads the data keys bucket too (tresor backup), rather than
	// as its reader; a holder that advertises no keeper (an older build)
	// is joined as its reader.
	Keeper bool
	// SyncInterval is how often JetStream fsyncs. Zero (the default) means
	// sync_interval: always, every write is on disk before it is
	// acknowledged. A positive value acknowledges writes that are only in
	// the OS page cache: a power loss or kernel crash loses up to that much
	// acknowledged data (docs/events.md, "Durability").
	SyncInterval time.Duration
	// ListenAddr, when not empty, opens a client TCP listener
	// ("127.0.0.1:4222"; port 0 picks a free one). Empty means no listener:
	// only in-process connections.
	ListenAddr string
	// ServerName names the server; required and unique in a cluster.
	ServerName string
	// Cluster, when not nil, joins a JetStream cluster over routes.
	Cluster *ClusterConfig
	// StartTimeout bounds the wait for the server to accept connections
	// (default 10s).
	StartTimeout time.Duration
	// Logs sends the server's log to stderr; off by default to keep test
	// output readable.
	Logs bool
}

// ClusterConfig joins an embedded server to a JetStream cluster. It exists
// for tests and small deployments; production clusters are usually
// external and reached with Connect.
type ClusterConfig struct {
	// Name is the cluster name, the same on every node.
	Name string
	// ListenAddr is where this node accepts routes ("127.0.0.1:6222").
	ListenAddr string
	// Routes are the route URLs of the other nodes
	// ("nats-route://127.0.0.1:6223").
	Routes []string
}

// EmbeddedServer is a running in-process nats-server with JetStream.
type EmbeddedServer struct {
	srv  *server.Server
	lock *dirLock
	// writerPassword authenticates Conn when the server has readers.
	writerPassword string
	// advert is the advertisement file written, "" for none.
	advert string
	// watch learns from the server's log that it refused a write.
	watch *writeWatch
}

// splitAddr parses "host:port" where port 0 means "pick one" (the server
// spells that -1).
func splitAddr(addr string) (string, int, error) {
	host, portText, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, fmt.Errorf("parse address %q: %w", addr, err)
	}
	port, err := strconv.Atoi(portText)
	if err != nil || port < 0 || port > 65535 {
		return "", 0, fmt.Errorf("parse address %q: bad port", addr)
	}
	if port == 0 {
		port = server.RANDOM_PORT
	}
	return host, port, nil
}

// RunEmbedded starts an in-process nats-server with JetStream on
// cfg.DataDir and waits until it accepts connections. It returns an error
// for a bad configuration or a server that does not start in time, and a
// *LockedError (ErrLocked) when another server runs on the directory.
//
// The lock lives here, around the one thing that must never run twice on a
// directory, rather than in the commands: every user of the embedded
// server (tresor serve, simulate, the read-only commands, the tests) is
// protected, and none can forget it. Two JetStream servers on one store
// directory each believe they own the files: acknowledged writes of one
// vanish under the other's, and one may write onto the other's chain. The
// lock is flock(2), which the kernel releases when the process ends
// however it ends, so a SIGKILL never leaves a stale lock behind.
func RunEmbedded(cfg EmbeddedConfig) (*EmbeddedServer, error) {
	if cfg.DataDir == "" {
		return nil, fmt.Errorf("run embedded nats-server: data dir is required: %w", ErrInvalid)
	}
	if cfg.Readers != nil && (cfg.ListenAddr != "" || cfg.Cluster != nil) {
		return nil, fmt.Errorf("run embedded nats-server: readers get their own listener, not with a listen address or a cluster: %w", ErrInvalid)
	}
	if cfg.StartTimeout <= 0 {
		cfg.StartTimeout = 10 * time.Second
	}
	if cfg.Holder == "" {
		cfg.Holder = filepath.Base(os.Args[0])
	}
	lock, err := lockDir(cfg.DataDir, cfg.Holder)
	if err != nil {
		return nil, err
	}
	e := &EmbeddedServer{lock: lock}
	if err := e.start(cfg); err != nil {
		lock.release()
		return nil, err
	}
	return e, nil
}

// start configures and starts the server of a locked directory.
func (e *EmbeddedServer) start(cfg EmbeddedConfig) error {
	// An advertisement left by a holder killed with SIGKILL names another
	// holding and is ignored anyway; removing it keeps the directory tidy.
	if err := os.Remove(filepath.Join(cfg.DataDir, readerAdvertName)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("run embedded nats-server: %w", err)
	}
	opts, err := serverOptions(cfg)
	if err != nil {
		return fmt.Errorf("run embedded nats-server: %w", err)
	}
	var readerPassword, keeperPassword string
	if cfg.Readers != nil {
		if readerPassword, keeperPassword, err = e.configureReaders(opts, *cfg.Readers); err != nil {
			return fmt.Errorf("run embedded nats-server: %w", err)
		}
	}
	srv, err := server.NewServer(opts)
	if err != nil {
		return fmt.Errorf("run embedded nats-server: %w", err)
	}
	if cfg.Logs {
		srv.ConfigureLogger()
	}
	e.watch = newWriteWatch(srv.Logger())
	srv.SetLogger(e.watch, false, false)
	srv.Start()
	if !srv.ReadyForConnections(cfg.StartTimeout) {
		srv.Shutdown()
		return fmt.Errorf("run embedded nats-server on %s: not ready after %s", cfg.DataDir, cfg.StartTimeout)
	}
	e.srv = srv
	if cfg.Readers == nil {
		return nil
	}
	return e.openToReaders(cfg, readerPassword, keeperPassword)
}

// serverOptions are the server's options but its readers' accounts:
// JetStream in the data directory, synced as configured, the listener
// and the cluster asked for.
func serverOptions(cfg EmbeddedConfig) (*server.Options, error) {
	opts := &server.Options{
		ServerName: cfg.ServerName,
		JetStream:  true,
		StoreDir:   cfg.DataDir,
		NoSigs:     true,
		NoLog:      !cfg.Logs,
		DontListen: cfg.ListenAddr == "" && cfg.Readers == nil,
	}
	// A committer batch may hold up to CommitBatchEventsMax events (the
	// server's default is BatchEventsMax): larger batches spread the
	// server's fixed cost per batch over more events.
	opts.JetStreamLimits.MaxBatchSize = CommitBatchEventsMax
	if cfg.SyncInterval <= 0 {
		opts.SyncAlways = true
	} else {
		opts.SyncInterval = cfg.SyncInterval
	}
	if cfg.ListenAddr != "" {
		host, port, err := splitAddr(cfg.ListenAddr)
		if err != nil {
			return nil, fmt.Errorf("listen: %w", err)
		}
		opts.Host, opts.Port = host, port
	}
	c := cfg.Cluster
	if c == nil {
		return opts, nil
	}
	if cfg.ServerName == "" || c.Name == "" {
		return nil, fmt.Errorf("a cluster needs a server name and a cluster name: %w", ErrInvalid)
	}
	host, port, err := splitAddr(c.ListenAddr)
	if err != nil {
		return nil, fmt.Errorf("cluster listen: %w", err)
	}
	opts.Cluster = server.ClusterOpts{Name: c.Name, Host: host, Port: port}
	for _, r := range c.Routes {
		u, err := url.Parse(r)
		if err != nil {
			return nil, fmt.Errorf("route %q: %w", r, err)
		}
		opts.Routes = append(opts.Routes, u)
	}
	return opts, nil
}

// openToReaders enables JetStream in the stream's account of a server
// with readers' accounts and advertises the readers' credentials in the
// data directory.
func (e *EmbeddedServer) openToReaders(cfg EmbeddedConfig, readerPassword, keeperPassword string) error {
	// With accounts configured, nats-server enables JetStream only for
	// accounts that ask; the stream's account is the global one, where it
	// has always been (its files are under $G).
	if err := e.srv.GlobalAccount().EnableJetStream(nil, nil); err != nil {
		e.stop()
		return fmt.Errorf("run embedded nats-server on %s: enable JetStream: %w", cfg.DataDir, err)
	}
	access := cfg.Readers.withDefaults()
	ad := readerAdvert{URL: e.srv.ClientURL(), User: readerUser, Password: readerPassword, InboxPrefix: access.InboxPrefix,
		KeeperUser: keeperUser, KeeperPassword: keeperPassword, Instance: e.lock.holder.Instance}
	if err := advertise(cfg.DataDir, ad); err != nil {
		e.stop()
		return err
	}
	e.advert = filepath.Join(cfg.DataDir, readerAdvertName)
	return nil
}

// configureReaders sets up authentication: the writer (Conn) in the
// stream's account, in-process only; the reader and the keeper each in an
// account of its own with their access; and the listener on 127.0.0.1.
// It returns the reader's password and the keeper's.
func (e *EmbeddedServer) configureReaders(opts *server.Options, access ReaderAccess) (reader, keeper string, err error) {
	stream, readers, keepers, err := access.accounts()
	if err != nil {
		return "", "", err
	}
	if e.writerPassword, err = randomPassword(); err != nil {
		return "", "", err
	}
	if reader, err = randomPassword(); err != nil {
		return "", "", err
	}
	if keeper, err = randomPassword(); err != nil {
		return "", "", err
	}
	opts.Host, opts.Port = "127.0.0.1", server.RANDOM_PORT
	opts.Accounts = []*server.Account{stream, readers, keepers}
	opts.Users = []*server.User{
		// No account: the global one, the stream's. IN_PROCESS (jwt's
		// ConnectionTypeInProcess) refuses this user over TCP, so the
		// listener serves readers only, whatever leaks.
		{Username: writerUser, Password: e.writerPassword, AllowedConnectionTypes: map[string]struct{}{"IN_PROCESS": {}}},
		{Username: readerUser, Password: reader, Account: readers, Permissions: access.permissions()},
		{Username: keeperUser, Password: keeper, Account: keepers, Permissions: access.keeper().permissions()},
	}
	return reader, keeper, nil
}

// Conn opens a client connection to the server with full rights:
// in-process when it has no TCP listener or when the listener is the
// readers' (then as the in-process-only user), over TCP otherwise (so that
// a test can kill it like a real network peer). Extra nats options are
// appended.
func (e *EmbeddedServer) Conn(opts ...nats.Option) (*nats.Conn, error) {
	url := e.srv.ClientURL()
	base := []nats.Option{nats.Name("tresor-eventstore")}
	switch {
	case e.writerPassword != "":
		// The listener is the readers'; the writer stays in-process.
		base = append(base, nats.InProcessServer(e.srv), nats.UserInfo(writerUser, e.writerPassword))
		url = ""
	case e.srv.Addr() == nil:
		base = append(base, nats.InProcessServer(e.srv))
		url = ""
	}
	nc, err := nats.Connect(url, append(base, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("connect to embedded nats-server: %w", err)
	}
	return nc, nil
}

// ClientURL is the TCP URL clients use, empty without a listener. With
// readers it is the readers' listener, which needs their credentials.
func (e *EmbeddedServer) ClientURL() string {
	if e.srv.Addr() == nil {
		return ""
	}
	return e.srv.ClientURL()
}

// WriteErr is the first write the server's store refused (wrapping
// ErrNoSpace for a full disk), nil while it has refused none. Such a
// refusal sticks: nats-server's file store answers every later write with
// it, and answers nothing to the publisher, who would otherwise learn it
// only from a timeout. Only a restart of the server clears it.
func (e *EmbeddedServer) WriteErr() error { return e.watch.err() }

// WriteFailed is closed at the first write the server's store refused.
func (e *EmbeddedServer) WriteFailed() <-chan struct{} { return e.watch.failed }

// Name is the server name, as reported in stream cluster info.
func (e *EmbeddedServer) Name() string { return e.srv.Name() }

// Shutdown stops the server, waits until it has released its files, then
// releases the data directory. Calling it again does nothing.
func (e *EmbeddedServer) Shutdown() {
	if e.lock == nil {
		return
	}
	if e.advert != "" {
		// No new reader is sent here; the connected ones are cut off.
		os.Remove(e.advert)
	}
	e.stop()
}

// stop stops the server and releases the lock.
func (e *EmbeddedServer) stop() {
	e.srv.Shutdown()
	e.srv.WaitForShutdown()
	e.lock.release()
	e.lock = nil
}

// checkServerVersion refuses servers without atomic batch publish.
func checkServerVersion(nc *nats.Conn) error {
	v := nc.ConnectedServerVersion()
	major, minor, ok := parseVersion(v)
	if !ok {
		return fmt.Errorf("check nats-server version %q: unparsable: %w", v, ErrServerTooOld)
	}
	if major < serverMajorMin || (major == serverMajorMin && minor < serverMinorMin) {
		return fmt.Errorf("nats-server %s found at %s, need >= %d.%d for atomic batch publish: %w",
			v, nc.ConnectedUrlRedacted(), serverMajorMin, serverMinorMin, ErrServerTooOld)
	}
	return nil
}

func parseVersion(v string) (int, int, bool) {
	v = strings.TrimPrefix(v, "v")
	parts := strings.SplitN(v, ".", 3)
	if len(parts) < 2 {
		return 0, 0, false
	}
	major, err1 := strconv.Atoi(parts[0])
	minor, err2 := strconv.Atoi(parts[1])
	return major, minor, errors.Join(err1, err2) == nil
}

// A connection to an external server pings it every pingInterval and
// gives it up after pingsOutMax unanswered pings, for the next server of
// the URL list: a node that hangs with its sockets open (a stopped process,
// a partition) is left within about 8 s. nats.go's defaults (2 minutes, 2
// pings) left writers and readers on such a node, answering nothing while
// saying they were connected, for 4 to 5 minutes. Not quicker: a server
// merely slow for a few seconds (a loaded machine) would be left too, and
// the answers in flight on the connection lost with it.
const (
	pingInterval = 2 * time.Second
	pingsOutMax  = 3
)

// Connect dials an external NATS server or cluster (comma-separated URLs),
// checks its version and creates or verifies the stream. It returns an
// error wrapping ErrServerTooOld, ErrUnsafeStream or the dial error.
func Connect(ctx context.Context, urls string, cfg Config, opts ...nats.Option) (*NATSStore, error) {
	base := []nats.Option{
		nats.Name("tresor-eventstore"),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
		nats.PingInterval(pingInterval),
		nats.MaxPingsOutstanding(pingsOutMax),
	}
	connect := func(context.Context) (*nats.Conn, error) {
		nc, err := nats.Connect(urls, append(base, opts...)...)
		// A URL that does not parse, or credentials refused, stay so.
		if ue := (*url.Error)(nil); errors.As(err, &ue) || errors.Is(err, nats.ErrAuthorization) {
			return nil, finalError{err}
		}
		return nc, err
	}
	var nc *nats.Conn
	var err error
	if cfg.ReadOnly {
		nc, err = connect(ctx)
	} else {
		// A writer started with its cluster (every machine back at once)
		// may find no server up yet: it waits as for its stream, where it
		// exited at once on "no servers available for connection".
		nc, err = OpenPatiently(ctx, cfg.Logger, "connection to "+urls, connect)
	}
	if err != nil {
		return nil, fmt.Errorf("connect to nats %s: %w", urls, err)
	}
	st, err := Open(ctx, nc, cfg)
	if err != nil {
		nc.Close()
		return nil, err
	}
	st.ownsConn = true
	return st, nil
}

// Open connects a store to an embedded server (in-process) and creates or
// verifies the stream. The store owns the connection.
func (e *EmbeddedServer) Open(ctx context.Context, cfg Config) (*NATSStore, error) {
	nc, err := e.Conn()
	if err != nil {
		return nil, err
	}
	st, err := Open(ctx, nc, cfg)
	if err != nil {
		nc.Close()
		return nil, err
	}
	st.ownsConn = true
	return st, nil
}
