package e2e_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/natsjs"
	"github.com/agentbus/agentbus/pkg/server"
	"github.com/agentbus/agentbus/pkg/settings"
	"github.com/agentbus/agentbus/test/testkit"
	"github.com/nats-io/jwt/v2"
	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"
)

// pki is a certificate authority and the PEM files it signed, in a test's
// directory.
type pki struct {
	CA, ServerCert, ServerKey, ClientCert, ClientKey string
}

// makePKI makes a CA, a server certificate for 127.0.0.1 and a client
// certificate, with crypto/x509, as files under dir.
func makePKI(t *testing.T, dir string) pki {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "agentbus test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	write := func(name, typ string, der []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	leaf := func(serial int64, name string, usage x509.ExtKeyUsage, ips []net.IP) (string, string) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
			NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature,
			ExtKeyUsage: []x509.ExtKeyUsage{usage}, IPAddresses: ips}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		kder, err := x509.MarshalECPrivateKey(key)
		if err != nil {
			t.Fatal(err)
		}
		return write(name+".pem", "CERTIFICATE", der), write(name+"-key.pem", "EC PRIVATE KEY", kder)
	}
	p := pki{CA: write("ca.pem", "CERTIFICATE", caDER)}
	p.ServerCert, p.ServerKey = leaf(2, "server", x509.ExtKeyUsageServerAuth, []net.IP{net.ParseIP("127.0.0.1")})
	p.ClientCert, p.ClientKey = leaf(3, "client", x509.ExtKeyUsageClientAuth, nil)
	return p
}

// requireTLS makes a nats-server demand TLS with a client certificate
// signed by p's CA.
func requireTLS(t *testing.T, p pki) func(*natsserver.Options) {
	return func(o *natsserver.Options) {
		tc, err := natsserver.GenTLSConfig(&natsserver.TLSConfigOpts{CertFile: p.ServerCert, KeyFile: p.ServerKey, CaFile: p.CA, Verify: true})
		if err != nil {
			t.Fatal(err)
		}
		o.TLSConfig, o.TLS, o.TLSVerify, o.TLSTimeout = tc, true, true, 5
	}
}

// startExternal starts agentbus against the nats-server at url with
// mutate's NATS settings and returns it, or the error of its start.
func startExternal(t *testing.T, url string, mutate func(*settings.Config)) (*server.Server, error) {
	t.Helper()
	cfg := settings.Default()
	cfg.Listen, cfg.Data = "127.0.0.1:0", t.TempDir()
	testkit.NoNATSPort(&cfg)
	cfg.NATS.URL = url
	mutate(&cfg)
	s, err := server.Start(t.Context(), cfg, testkit.Logger())
	if err == nil {
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = s.Stop(ctx)
		})
	}
	return s, err
}

// commandFlows sends a command through s and waits for its event.
func commandFlows(t *testing.T, s *server.Server) {
	t.Helper()
	corr := submitCommand(t, s.URL, placeOrder("o-tls-1"))
	eventsOf(t, s.URL, corr, 1)
}

// TestNATSTLSAndNKey: against a nats-server that requires TLS with a
// client certificate and admits one NKey user, agentbus connects with
// nats.tls.ca, nats.tls.cert, nats.tls.key and nats.nkey and runs a
// command to its event. Without the NKey seed it is refused as bad
// credentials; without the client certificate, or without the CA, the
// connection fails; nothing is served either way.
func TestNATSTLSAndNKey(t *testing.T) {
	dir := t.TempDir()
	p := makePKI(t, dir)
	user, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := user.PublicKey()
	seed, _ := user.Seed()
	seedFile := filepath.Join(dir, "agentbus.nk")
	if err := os.WriteFile(seedFile, seed, 0o600); err != nil {
		t.Fatal(err)
	}
	url := testkit.NATSServer(t, requireTLS(t, p), func(o *natsserver.Options) {
		o.Nkeys = []*natsserver.NkeyUser{{Nkey: pub}}
	})
	full := func(c *settings.Config) {
		c.NATS.TLS.CA, c.NATS.TLS.Cert, c.NATS.TLS.Key, c.NATS.NKey = p.CA, p.ClientCert, p.ClientKey, seedFile
	}
	s, err := startExternal(t, url, full)
	if err != nil {
		t.Fatalf("agentbus over TLS with an NKey: %v", err)
	}
	commandFlows(t, s)

	for _, c := range []struct {
		name    string
		mutate  func(*settings.Config)
		refused bool // as credentials, ErrCredentialsRefused
	}{
		{"no nkey", func(c *settings.Config) { full(c); c.NATS.NKey = "" }, true},
		{"no client certificate", func(c *settings.Config) { full(c); c.NATS.TLS.Cert, c.NATS.TLS.Key = "", "" }, false},
		{"no CA", func(c *settings.Config) { full(c); c.NATS.TLS.CA = "" }, false},
	} {
		_, err := startExternal(t, url, c.mutate)
		if err == nil {
			t.Errorf("%s: agentbus started", c.name)
			continue
		}
		if got := errors.Is(err, natsjs.ErrCredentialsRefused); got != c.refused {
			t.Errorf("%s: %v (credentials refused: %v, want %v)", c.name, err, got, c.refused)
		}
		if natsjs.NotYet(err) && c.refused {
			t.Errorf("%s: %v would be tried again by serve", c.name, err)
		}
	}
}

// TestNATSCreds: against a nats-server in operator mode (an operator, an
// account with JetStream, a system account, all JWTs) over TLS, agentbus
// connects as the account's user with nats.creds, a .creds file (the
// user's JWT and NKey seed), and runs a command to its event; a user the
// account did not sign is refused.
func TestNATSCreds(t *testing.T) {
	dir := t.TempDir()
	p := makePKI(t, dir)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	operator, err := nkeys.CreateOperator()
	must(err)
	opub, _ := operator.PublicKey()
	oc := jwt.NewOperatorClaims(opub)
	account := func(name string, js bool) (nkeys.KeyPair, string, string) {
		kp, err := nkeys.CreateAccount()
		must(err)
		apub, _ := kp.PublicKey()
		ac := jwt.NewAccountClaims(apub)
		ac.Name = name
		if js {
			ac.Limits.JetStreamLimits = jwt.JetStreamLimits{MemoryStorage: -1, DiskStorage: -1, Streams: -1, Consumer: -1}
		}
		token, err := ac.Encode(operator)
		must(err)
		return kp, apub, token
	}
	sysKP, sysPub, sysJWT := account("SYS", false)
	_ = sysKP
	appKP, appPub, appJWT := account("APP", true)
	resolver := &natsserver.MemAccResolver{}
	must(resolver.Store(sysPub, sysJWT))
	must(resolver.Store(appPub, appJWT))
	creds := func(name string, signer nkeys.KeyPair) string {
		u, err := nkeys.CreateUser()
		must(err)
		upub, _ := u.PublicKey()
		useed, _ := u.Seed()
		uc := jwt.NewUserClaims(upub)
		uc.Name = name
		token, err := uc.Encode(signer)
		must(err)
		b, err := jwt.FormatUserConfig(token, useed)
		must(err)
		f := filepath.Join(dir, name+".creds")
		must(os.WriteFile(f, b, 0o600))
		return f
	}
	good := creds("agentbus", appKP)
	stranger, err := nkeys.CreateAccount() // an account the operator never signed
	must(err)
	bad := creds("stranger", stranger)
	url := testkit.NATSServer(t, requireTLS(t, p), func(o *natsserver.Options) {
		o.TrustedOperators = []*jwt.OperatorClaims{oc}
		o.AccountResolver = resolver
		o.SystemAccount = sysPub
	})
	withCreds := func(f string) func(*settings.Config) {
		return func(c *settings.Config) {
			c.NATS.TLS.CA, c.NATS.TLS.Cert, c.NATS.TLS.Key, c.NATS.Creds = p.CA, p.ClientCert, p.ClientKey, f
		}
	}
	s, err := startExternal(t, url, withCreds(good))
	if err != nil {
		t.Fatalf("agentbus with a .creds file: %v", err)
	}
	commandFlows(t, s)
	if _, err := startExternal(t, url, withCreds(bad)); !errors.Is(err, natsjs.ErrCredentialsRefused) {
		t.Errorf("a user of an unknown account: %v, want the credentials refused", err)
	}
}
