// Command example-receiver is a webhook receiver to try agentbus's webhooks
// on one machine: it listens on a loopback address, verifies each
// delivery's signature with the subscription's secret (the Standard
// Webhooks scheme, with the standard library alone), prints each verified
// event on standard output and answers 204. A delivery it cannot verify is
// answered 401 (agentbus retries it) and printed as refused.
//
// The secret is read from --secret-file at each delivery, so the receiver
// can start before the subscription whose creation returns the secret:
//
//	go run ./cmd/agentbus serve --allow-private-webhooks
//	go run ./cmd/example-receiver --listen 127.0.0.1:9000 --secret-file /tmp/agentbus-webhook-secret
//
// then create a subscription with webhook.url http://127.0.0.1:9000/ and
// write its webhook.secret to that file (README "Webhooks").
package main

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "example-receiver:", err)
		os.Exit(1)
	}
}

// synopsis heads -h.
const synopsis = `usage: example-receiver --secret-file FILE [--listen ADDR]

A webhook receiver for trying agentbus's webhooks: it verifies each
delivery's signature with the secret in FILE (read at each delivery),
prints each verified event and answers 204; it answers 401 to a delivery
it cannot verify. agentbus delivers to loopback addresses only with
--allow-private-webhooks, for local development.`

// maxBody bounds the body of a delivery the receiver reads.
const maxBody = 8 << 20

// run serves until ctx ends; -h prints the usage and returns nil.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fl := flag.NewFlagSet("example-receiver", flag.ContinueOnError)
	fl.SetOutput(stderr)
	fl.Usage = func() {
		fmt.Fprintf(fl.Output(), "%s\n\nflags:\n", synopsis)
		fl.PrintDefaults()
	}
	listen := fl.String("listen", "127.0.0.1:9000", "address to listen on")
	secretFile := fl.String("secret-file", "", "file holding the subscription's secret (whsec_...), read at each delivery")
	if err := fl.Parse(args); errors.Is(err, flag.ErrHelp) {
		return nil
	} else if err != nil {
		return err
	}
	if fl.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fl.Arg(0))
	}
	if *secretFile == "" {
		return errors.New("--secret-file is required: the file the subscription's secret is written to")
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: handler(*secretFile, stdout), ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(stdout, "listening on http://%s/, verifying with the secret in %s\n", ln.Addr(), *secretFile)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	return srv.Shutdown(sctx)
}

// handler verifies each POST with the secret in secretFile and prints
// "verified <webhook-id>: <body>" or "refused <webhook-id>: <why>" on out,
// one line each.
func handler(secretFile string, out io.Writer) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			http.Error(w, "webhook deliveries are POSTed", http.StatusMethodNotAllowed)
			return
		}
		body, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
		if err != nil || len(body) > maxBody {
			http.Error(w, "the body cannot be read", http.StatusRequestEntityTooLarge)
			return
		}
		id := r.Header.Get("webhook-id")
		secret, err := os.ReadFile(secretFile)
		if err == nil {
			err = verify(strings.TrimSpace(string(secret)), r.Header, body, time.Now())
		}
		if err != nil {
			fmt.Fprintf(out, "refused %s: %v\n", id, err)
			http.Error(w, "the signature cannot be verified", http.StatusUnauthorized)
			return
		}
		fmt.Fprintf(out, "verified %s: %s\n", id, body)
		w.WriteHeader(http.StatusNoContent)
	})
}

// verify checks a delivery under the Standard Webhooks scheme:
// webhook-signature holds "v1,<base64 HMAC-SHA256>" signatures, space-
// separated (two while a secret is rotated), of "<webhook-id>.<webhook-
// timestamp>.<body>", keyed with the secret (for whsec_<base64>, the
// decoded base64); the timestamp must be within 5 minutes of now.
func verify(secret string, h http.Header, body []byte, now time.Time) error {
	key := []byte(secret)
	if b64, ok := strings.CutPrefix(secret, "whsec_"); ok {
		var err error
		if key, err = base64.StdEncoding.DecodeString(b64); err != nil {
			return fmt.Errorf("the secret: %w", err)
		}
	}
	ts, err := strconv.ParseInt(h.Get("webhook-timestamp"), 10, 64)
	if err != nil || now.Sub(time.Unix(ts, 0)).Abs() > 5*time.Minute {
		return errors.New("webhook-timestamp is missing or more than 5 minutes off")
	}
	mac := hmac.New(sha256.New, key) // key: for whsec_<base64>, the decoded base64
	mac.Write([]byte(h.Get("webhook-id") + "." + h.Get("webhook-timestamp") + "."))
	mac.Write(body)
	want := "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
	for _, sig := range strings.Fields(h.Get("webhook-signature")) { // two during a rotation
		if hmac.Equal([]byte(sig), []byte(want)) {
			return nil
		}
	}
	return errors.New("no signature matches the secret")
}
