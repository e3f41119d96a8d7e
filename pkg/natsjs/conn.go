// Package natsjs is agentbus's only door to NATS: it runs the embedded
// server, connects to an external one, checks that the server can be
// trusted, applies the declarative stream files, backs the streams up and
// restores them (Backup, Restore), and implements the bus ports on
// JetStream. It translates broker errors into errs sentinels.
package natsjs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// MinAPILevel is the JetStream API level agentbus needs (nats-server 2.12).
const MinAPILevel = 2

// dialTimeout bounds connecting to one external server (TCP dial, TLS and
// the NATS handshake).
const dialTimeout = 5 * time.Second

// ErrCredentialsRefused is the NATS server's answer to a connection
// without the credentials it requires, or with ones it does not accept.
var ErrCredentialsRefused = errors.New("the NATS server refused the credentials (or their absence)")

// Config says where NATS is. With URL empty an embedded server is started.
type Config struct {
	URL       string // external server(s), comma separated
	CredsFile string // NATS credentials file
	NKeyFile  string // NKey seed file
	TLSCA     string
	TLSCert   string
	TLSKey    string
	Name      string // connection name
	// User and Password authenticate to an external server, or to a
	// running agentbus's embedded one (AdminAccess; a User of it).
	User     string
	Password string
	// InboxPrefix is the prefix of the connection's reply subjects;
	// default _INBOX.<User> with User set (where an embedded server's User
	// gets its replies), else nats.go's _INBOX.
	InboxPrefix string
	// WaitForServer keeps dialling an external server that does not accept
	// connections yet (started together, or a pod ahead of its cluster)
	// until the context of Connect ends. Off, a missing server is an error
	// at once: right for one-shot commands.
	WaitForServer bool

	// Embedded server settings, used only when URL is empty.
	DataDir string // JetStream store directory
	// Listen is the host:port internal services reach the embedded server
	// on; empty keeps it in-process only.
	Listen string
	// SyncAlways fsyncs every write (slower, survives power loss on R1).
	SyncAlways bool
	// RequireAuth makes the client port require credentials even with no
	// Users: set when agentbus's HTTP side requires them. With either,
	// agentbus's own connection is an in-process-only user whose password
	// is made at each start and never leaves memory, the admin commands
	// reach the server as AdminUser (AdminFile), and every other client
	// needs one of Users' credentials.
	RequireAuth bool
	// Users are the internal services allowed on Listen.
	Users []User
	// Prefix of the subjects Users are limited to (default agentbus).
	Prefix string

	// ReadConns is how many more connections Connect opens for the reads
	// callers ask for (QueryLog), apart from the one every other message
	// takes; 0 opens none, and QueryLog reads through that one.
	ReadConns int
}

// Conn is a live connection to a JetStream-enabled server.
type Conn struct {
	NC     *nats.Conn
	JS     jetstream.JetStream
	server *server.Server // embedded server, nil when external
	unlock func()         // releases the embedded server's data dir
	admin  string         // AdminFile written for the embedded server, "" for none
	reads  []*readConn    // the connections for QueryLog's reads
	// inboxes are the idle inboxes of the Logs' batched reads, on NC and
	// reads.
	inboxes *directInboxes
	log     *slog.Logger
	url     string // external server, "" when embedded
	opts    []nats.Option

	// store is the embedded server's data dir; abandon, set by Abandon
	// and while Connect has not succeeded, has what the start made of it
	// removed once the server has stopped.
	store   *dataDir
	abandon bool

	pullSilence time.Duration // tests only: how long a consumer waits for word of its request
}

// Connect starts the embedded server (URL empty) or dials the external one,
// and returns the connection. Close stops both. An embedded server whose
// Listen address is already taken is an error at once, naming the address.
// A server that refuses the credentials is an error wrapping
// ErrCredentialsRefused.
func Connect(ctx context.Context, cfg Config, log *slog.Logger) (*Conn, error) {
	c := &Conn{log: log, inboxes: newDirectInboxes()}
	opts := []nats.Option{
		// Synchronous subscriptions serve only batched direct gets
		// (directInbox): nats.go's default buffer of 65,536 messages
		// would take half a megabyte each.
		nats.SyncQueueLen(syncQueueLen),
		nats.Name(orDefault(cfg.Name, "agentbus")),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
		nats.DisconnectErrHandler(func(nc *nats.Conn, err error) {
			if err != nil {
				log.Warn("nats disconnected", "err", err, "connection", nc.Opts.Name)
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			log.Info("nats reconnected", "url", nc.ConnectedUrlRedacted(), "connection", nc.Opts.Name)
		}),
		// Asynchronous errors — a permission the NATS user lacks, a slow
		// consumer — go to the log like everything else, not to stderr.
		nats.ErrorHandler(func(nc *nats.Conn, sub *nats.Subscription, err error) {
			if sub != nil {
				log.Error("nats error", "err", err, "subscription", sub.Subject, "connection", nc.Opts.Name)
				return
			}
			log.Error("nats error", "err", err, "connection", nc.Opts.Name)
		}),
	}
	url := cfg.URL
	if url == "" {
		ns, store, unlock, auth, err := startEmbedded(ctx, cfg)
		if err != nil {
			return nil, err
		}
		c.server, c.store, c.unlock = ns, store, unlock
		c.abandon = true // until Connect succeeds
		// No write deadline on the in-process pipe: nats.go's default (a
		// minute) set and cleared a timer on every flush, for a peer that
		// is this process; a server that stopped reading it would be stuck
		// the same either way.
		opts = append(opts, nats.InProcessServer(ns), nats.FlusherTimeout(0))
		if auth.self != "" {
			opts = append(opts, nats.UserInfo(selfUser, auth.self))
		}
		if auth.admin != "" {
			dir := orDefault(cfg.DataDir, "data")
			if err := writeAdminFile(dir, ns.ClientURL(), auth.admin); err != nil {
				c.stopServer()
				return nil, err
			}
			c.admin = filepath.Join(dir, AdminFile)
			if len(cfg.Users) == 0 {
				log.Info("embedded NATS requires credentials on its client port; no internal service users are configured "+
					"(nats.embedded.users), so only the admin commands can connect there", "url", ns.ClientURL(), "admin", c.admin)
			} else {
				log.Info("embedded NATS requires credentials on its client port", "url", ns.ClientURL(),
					"users", len(cfg.Users), "admin", c.admin)
			}
		}
	} else {
		if cfg.User != "" {
			opts = append(opts, nats.UserInfo(cfg.User, cfg.Password))
		}
		if p := inboxPrefix(cfg); p != "" {
			opts = append(opts, nats.CustomInboxPrefix(p))
		}
		if cfg.CredsFile != "" {
			opts = append(opts, nats.UserCredentials(cfg.CredsFile))
		}
		if cfg.NKeyFile != "" {
			o, err := nats.NkeyOptionFromSeed(cfg.NKeyFile)
			if err != nil {
				return nil, fmt.Errorf("nats nkey: %w", err)
			}
			opts = append(opts, o)
		}
		if cfg.TLSCA != "" {
			opts = append(opts, nats.RootCAs(cfg.TLSCA))
		}
		if cfg.TLSCert != "" {
			opts = append(opts, nats.ClientCert(cfg.TLSCert, cfg.TLSKey))
		}
		// nats.Timeout bounds the dial and handshake of one server only.
		opts = append(opts, nats.Timeout(dialTimeout))
	}
	nc, err := nats.Connect(url, opts...)
	// With WaitForServer, an external server that is not up yet is dialled
	// again until the start-up deadline.
	for tries := 0; url != "" && cfg.WaitForServer && errors.Is(err, nats.ErrNoServers) && ctx.Err() == nil; tries++ {
		if tries == 0 {
			log.Info("waiting for NATS to accept connections", "url", redactURL(url))
		}
		select {
		case <-ctx.Done():
		case <-time.After(500 * time.Millisecond):
			nc, err = nats.Connect(url, opts...)
		}
	}
	if err != nil {
		c.stopServer()
		if errors.Is(err, nats.ErrAuthorization) {
			err = fmt.Errorf("%w (%v)", ErrCredentialsRefused, err)
		}
		return nil, fmt.Errorf("cannot connect to NATS at %s: %w", redactURL(url), err)
	}
	c.NC, c.url, c.opts = nc, url, opts
	if cfg.ReadConns > 0 {
		if c.reads, err = dialReads(url, opts, orDefault(cfg.Name, "agentbus"), cfg.ReadConns); err != nil {
			c.Close()
			return nil, err
		}
	}
	js, err := jetstream.New(nc)
	if err != nil {
		c.Close()
		return nil, err
	}
	c.JS, c.abandon = js, false
	return c, nil
}

// Dial opens one more connection to the same server with the same options
// (in-process for the embedded server), named name. The caller closes it.
// agentbus itself does not use it: test/bench observes through it, as an
// outside client would.
func (c *Conn) Dial(name string) (*nats.Conn, error) {
	opts := append(append([]nats.Option{}, c.opts...), nats.Name(name))
	return nats.Connect(c.url, opts...)
}

// EmbeddedServerName is the server name of agentbus's embedded
// nats-server, by which admin commands recognise a running agentbus.
const EmbeddedServerName = "agentbus-embedded"

// Embedded reports whether agentbus runs its own server.
func (c *Conn) Embedded() bool { return c.server != nil }

// ClientURL is the address internal services use to reach the embedded
// server, or "" when it listens in-process only or is external.
func (c *Conn) ClientURL() string {
	if c.server == nil || c.server.Addr() == nil {
		return ""
	}
	return c.server.ClientURL()
}

// Close drains the connection and stops the embedded server, if any.
func (c *Conn) Close() {
	for _, r := range c.reads {
		r.nc.Close() // reads in flight fail; they are callers' own
	}
	if c.NC != nil {
		_ = c.NC.Drain()
		for i := 0; i < 100 && !c.NC.IsClosed(); i++ {
			time.Sleep(20 * time.Millisecond)
		}
		c.NC.Close()
	}
	c.stopServer()
}

func (c *Conn) stopServer() {
	if c.server != nil {
		c.server.Shutdown()
		c.server.WaitForShutdown()
	}
	if c.admin != "" {
		if err := os.Remove(c.admin); err != nil && !errors.Is(err, os.ErrNotExist) {
			c.log.Warn("cannot remove the embedded NATS admin credential", "file", c.admin, "err", err)
		}
		c.admin = ""
	}
	if c.abandon && c.store != nil {
		if err := c.store.remove(); err != nil {
			c.log.Warn("cannot remove what a failed start made of the data dir", "dir", c.store.path, "err", err)
		}
	}
	if c.unlock != nil {
		c.unlock()
		c.unlock = nil
	}
}

// Abandon is Close after a start that failed: once the embedded server
// has stopped it also removes what Connect made of its data dir — the
// directory when it did not exist (and its missing parents), else the
// lock file and jetstream/ when they did not — with everything since
// written in them. What was there before is left as it was. With an
// external server it is Close.
func (c *Conn) Abandon() {
	c.abandon = true
	c.Close()
}

// startEmbedded starts the embedded server and waits until it accepts
// connections, at most 30s and not past the deadline of ctx. It fails at
// once when cfg.Listen is taken. With credentials required (cfg.RequireAuth
// or cfg.Users), auth holds agentbus's own and the administrator's. store
// notes what the start made of the data dir; when it fails, that is
// removed (unless the dir is locked by another process).
func startEmbedded(ctx context.Context, cfg Config) (ns *server.Server, store *dataDir, unlock func(), auth embeddedAuth, err error) {
	dir := orDefault(cfg.DataDir, "data")
	made, err := makeDataDir(dir)
	if err != nil {
		return nil, nil, nil, auth, err
	}
	release, err := lockDir(dir)
	if err != nil { // not ours: another process may be making it
		return nil, nil, nil, auth, err
	}
	ok := false
	defer func() {
		if !ok {
			_ = made.remove() // what this start made, nothing else
			release()
		}
	}()
	opts := &server.Options{
		ServerName:         EmbeddedServerName,
		JetStream:          true,
		StoreDir:           dir,
		NoSigs:             true,
		NoLog:              true,
		SyncAlways:         cfg.SyncAlways,
		JetStreamMaxMemory: 256 << 20,
		MaxPayload:         8 << 20,
	}
	if cfg.Listen == "" {
		opts.DontListen = true
	} else {
		host, port, err := net.SplitHostPort(cfg.Listen)
		if err != nil {
			return nil, nil, nil, auth, fmt.Errorf("embedded nats: listen address %q: %w", cfg.Listen, err)
		}
		p, err := strconv.Atoi(port)
		if err != nil {
			return nil, nil, nil, auth, fmt.Errorf("embedded nats: listen port %q: %w", port, err)
		}
		opts.Host, opts.Port = host, p
		switch p {
		case server.RANDOM_PORT: // any free port: nothing to check
		case 0: // nats-server's default port
			if err := checkFree(net.JoinHostPort(host, strconv.Itoa(server.DEFAULT_PORT))); err != nil {
				return nil, nil, nil, auth, err
			}
		default:
			if err := checkFree(cfg.Listen); err != nil {
				return nil, nil, nil, auth, err
			}
		}
	}
	if cfg.RequireAuth || len(cfg.Users) > 0 {
		if auth, err = secure(opts, cfg); err != nil {
			return nil, nil, nil, auth, err
		}
	}
	ns, err = server.NewServer(opts)
	if err != nil {
		return nil, nil, nil, auth, fmt.Errorf("embedded nats: %w", err)
	}
	wait := 30 * time.Second
	if dl, ok := ctx.Deadline(); ok {
		wait = min(wait, time.Until(dl))
	}
	go ns.Start()
	if !ns.ReadyForConnections(wait) {
		ns.Shutdown()
		ns.WaitForShutdown() // before the data dir is unlocked
		return nil, nil, nil, auth, fmt.Errorf("embedded nats: not ready within the start-up time (%s)", max(wait, 0).Round(time.Second))
	}
	ok = true
	return ns, made, release, auth, nil
}

// checkFree returns an error naming addr (and the nats.listen setting) when
// nothing can listen on it, typically because another agentbus or a
// nats-server already does. Started there, nats-server would only note
// the failure and never become ready.
func checkFree(addr string) error {
	ln, err := net.Listen("tcp", addr)
	switch {
	case errors.Is(err, syscall.EADDRINUSE):
		return fmt.Errorf("embedded nats: %s is already in use (another agentbus or nats-server?); "+
			"set nats.listen (--nats-listen) to a free address, or to \"\" to keep NATS in-process", addr)
	case err != nil:
		return fmt.Errorf("embedded nats: cannot listen on %s (nats.listen, --nats-listen): %w", addr, err)
	}
	return ln.Close()
}

// inboxPrefix returns the inbox prefix of a connection to an external
// server: cfg.InboxPrefix, or User{Name: cfg.User}.InboxPrefix() when the
// user name can be a subject token, or "" for nats.go's.
func inboxPrefix(cfg Config) string {
	if cfg.InboxPrefix != "" || cfg.User == "" || strings.ContainsAny(cfg.User, ".*> \t\r\n") {
		return cfg.InboxPrefix
	}
	return User{Name: cfg.User}.InboxPrefix()
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}
