package natsjs

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/nats-io/nats-server/v2/server"
)

// The users of a secured embedded server besides the internal services.
const (
	// selfUser is agentbus's own connection: in-process only, with a
	// random password made at each start and kept in memory.
	selfUser = "agentbus"
	// AdminUser is the administrator on the client port, used by the admin
	// commands (keys, streams apply) while serve runs; its credential is
	// in AdminFile.
	AdminUser = "agentbus-admin"
)

// ReservedUsers are the user names an internal service cannot have.
var ReservedUsers = []string{selfUser, AdminUser}

// AdminFile is the file, in the embedded server's data directory, that
// holds how to reach the running server as AdminUser: written (mode 0600)
// once the server listens with credentials required, removed when it
// stops. Whoever can read it can do anything on the server; so can
// whoever can read the store beside it.
const AdminFile = "nats-admin.json"

// Connection types of nats-server's allowed_connection_types.
const (
	connInProcess = "IN_PROCESS"
	connStandard  = "STANDARD"
)

// User is an internal service allowed on the embedded server's client
// port, limited to its tenants' subjects of the NATS contract (see
// Permissions).
type User struct {
	// Name is the user name (with Password), and names the NKey user in
	// messages. The user's inbox prefix is _INBOX.<Name>.
	Name string
	// Password, in clear or a bcrypt hash, or PasswordFile holding it
	// (read at start, surrounding space trimmed), or NKey, the user's
	// public NKey: exactly one.
	Password     string
	PasswordFile string
	NKey         string
	// Tenants the user may act for; "*" is every tenant.
	Tenants []string
	// Commands and Events say what the user may do on each stream.
	Commands, Events Access
	// Consumers are the durable consumer names the user may create,
	// read, acknowledge and delete on the streams it may read.
	Consumers []string
}

// Access is what a user may do on one stream: publish to its tenants'
// subjects, and read them (consumers, direct reads, live subscriptions).
type Access struct {
	Publish, Read bool
}

// InboxPrefix is the inbox prefix the user's client must use (nats.go:
// nats.CustomInboxPrefix): replies reach it only there.
func (u User) InboxPrefix() string { return "_INBOX." + u.Name }

// Permissions returns what u may publish and subscribe to on a server
// whose subjects start with prefix. Everything else is denied, in
// particular every key-value bucket (the API keys and the token signing
// key), stream and message deletion, other tenants' subjects, other
// users' and agentbus's inboxes, and any consumer not in u.Consumers.
//
//   - publish on <prefix>.cmd|evt.<tenant>.> where u may publish there;
//   - where u may read: subscribe to the same subjects (live), read the
//     last message of a subject under them ($JS.API.DIRECT.GET.<stream>.<subject>),
//     and create each of its consumers with one filter under them
//     ($JS.API.CONSUMER.CREATE.<stream>.<name>.<filter>: the server holds
//     the filter to the one in the request subject), then read it
//     (CONSUMER.INFO, MSG.NEXT), acknowledge ($JS.ACK.<stream>.<name>.…)
//     and delete it;
//   - for "*" (every tenant) also consumers with several filters, reads by
//     sequence (DIRECT.GET and STREAM.MSG.GET) and STREAM.INFO, which are
//     not limited by subject, on those streams only;
//   - $JS.API.INFO (the account's JetStream usage) and its own inbox.
func (u User) Permissions(prefix string) *server.Permissions {
	names := NamesFor(prefix)
	all := slices.Contains(u.Tenants, "*")
	tenants := u.Tenants
	if all {
		tenants = []string{"*"}
	}
	pub := []string{"$JS.API.INFO"}
	sub := []string{u.InboxPrefix() + ".>"}
	for _, s := range []struct {
		kind, stream string
		access       Access
	}{{"cmd", names.Commands, u.Commands}, {"evt", names.Events, u.Events}} {
		for _, t := range tenants {
			subjects := prefix + "." + s.kind + "." + t + ".>"
			if s.access.Publish {
				pub = append(pub, subjects)
			}
			if s.access.Read {
				sub = append(sub, subjects)
				pub = append(pub, "$JS.API.DIRECT.GET."+s.stream+"."+subjects)
				for _, c := range u.Consumers {
					pub = append(pub, "$JS.API.CONSUMER.CREATE."+s.stream+"."+c+"."+subjects)
				}
			}
		}
		if !s.access.Read {
			continue
		}
		for _, c := range u.Consumers {
			pub = append(pub,
				"$JS.API.CONSUMER.INFO."+s.stream+"."+c,
				"$JS.API.CONSUMER.MSG.NEXT."+s.stream+"."+c,
				"$JS.API.CONSUMER.DELETE."+s.stream+"."+c,
				// The server's ack subjects: $JS.ACK.<stream>.<consumer>
				// and five numbers.
				"$JS.ACK."+s.stream+"."+c+".*.*.*.*.*")
			if all {
				pub = append(pub, "$JS.API.CONSUMER.CREATE."+s.stream+"."+c, "$JS.API.CONSUMER.CREATE."+s.stream+"."+c+".>")
			}
		}
		if all {
			pub = append(pub, "$JS.API.DIRECT.GET."+s.stream, "$JS.API.STREAM.MSG.GET."+s.stream, "$JS.API.STREAM.INFO."+s.stream)
		}
	}
	return &server.Permissions{
		Publish:   &server.SubjectPermission{Allow: pub},
		Subscribe: &server.SubjectPermission{Allow: sub},
	}
}

// embeddedAuth is what a secured embedded server was given: agentbus's own
// password, and the administrator's (empty when the server does not
// listen).
type embeddedAuth struct {
	self, admin string
}

// secure makes opts require credentials: agentbus's own in-process user,
// the administrator when the server listens, and cfg.Users. It reads the
// users' password files.
func secure(opts *server.Options, cfg Config) (embeddedAuth, error) {
	var a embeddedAuth
	var err error
	if a.self, err = randomSecret(); err != nil {
		return a, err
	}
	opts.Users = []*server.User{{
		Username: selfUser, Password: a.self,
		AllowedConnectionTypes: map[string]struct{}{connInProcess: {}},
	}}
	if !opts.DontListen {
		if a.admin, err = randomSecret(); err != nil {
			return a, err
		}
		opts.Users = append(opts.Users, &server.User{
			Username: AdminUser, Password: a.admin,
			AllowedConnectionTypes: map[string]struct{}{connStandard: {}},
		})
	}
	prefix := orDefault(cfg.Prefix, "agentbus")
	for _, u := range cfg.Users {
		if slices.Contains(ReservedUsers, u.Name) {
			return a, fmt.Errorf("embedded nats: user %q is reserved for agentbus", u.Name)
		}
		// Internal services reach the client port; the in-process
		// connection is agentbus's alone.
		types := map[string]struct{}{connStandard: {}}
		if u.NKey != "" {
			opts.Nkeys = append(opts.Nkeys, &server.NkeyUser{Nkey: u.NKey, Permissions: u.Permissions(prefix), AllowedConnectionTypes: types})
			continue
		}
		pw := u.Password
		if u.PasswordFile != "" {
			raw, err := os.ReadFile(u.PasswordFile)
			if err != nil {
				return a, fmt.Errorf("embedded nats: user %q: password file: %w", u.Name, err)
			}
			if pw = strings.TrimSpace(string(raw)); pw == "" {
				return a, fmt.Errorf("embedded nats: user %q: password file %s is empty", u.Name, u.PasswordFile)
			}
		}
		opts.Users = append(opts.Users, &server.User{Username: u.Name, Password: pw, Permissions: u.Permissions(prefix), AllowedConnectionTypes: types})
	}
	return a, nil
}

// randomSecret returns 32 random bytes, base64url-encoded.
func randomSecret() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("embedded nats: random credential: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// adminAccess is the content of AdminFile.
type adminAccess struct {
	URL      string `json:"url"`
	User     string `json:"user"`
	Password string `json:"password"`
}

// writeAdminFile writes AdminFile in dir, readable by its owner only,
// replacing any left by a process that did not stop cleanly.
func writeAdminFile(dir, url, password string) error {
	b, err := json.Marshal(adminAccess{URL: url, User: AdminUser, Password: password})
	if err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, AdminFile+".*")
	if err != nil {
		return fmt.Errorf("embedded nats: admin credential: %w", err)
	}
	defer os.Remove(f.Name()) // after a successful rename, nothing is left there
	// CreateTemp makes the file 0600 already; say it, in case umask games change.
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return fmt.Errorf("embedded nats: admin credential: %w", err)
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return fmt.Errorf("embedded nats: admin credential: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("embedded nats: admin credential: %w", err)
	}
	if err := os.Rename(f.Name(), filepath.Join(dir, AdminFile)); err != nil {
		return fmt.Errorf("embedded nats: admin credential: %w", err)
	}
	return nil
}

// AdminAccess returns the connection settings (URL, User, Password) of
// the administrator of the embedded server of the agentbus running on
// dataDir, from its AdminFile; ok is false when there is none (no agentbus
// runs there, or its client port needs no credentials). The file may be
// left over from a process that did not stop cleanly: a connection with it
// then fails.
func AdminAccess(dataDir string) (cfg Config, ok bool, err error) {
	path := filepath.Join(orDefault(dataDir, "data"), AdminFile)
	raw, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return cfg, false, nil
	}
	if err != nil {
		return cfg, false, fmt.Errorf("admin credential of the running agentbus: %w", err)
	}
	var a adminAccess
	if err := json.Unmarshal(raw, &a); err != nil || a.URL == "" || a.User == "" || a.Password == "" {
		return cfg, false, fmt.Errorf("admin credential of the running agentbus: %s is not one agentbus wrote", path)
	}
	return Config{URL: a.URL, User: a.User, Password: a.Password}, true, nil
}
