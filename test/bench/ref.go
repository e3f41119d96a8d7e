package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/agentbus/agentbus/config"
	"github.com/labstack/echo/v4"
	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/xeipuuv/gojsonschema"
)

// refBase is what both bare references start from: a temp dir, an
// embedded nats-server on it (file storage, in-process connection), the
// place-order/1.0 schema compiled once, and Echo on a loopback port.
type refBase struct {
	URL    string
	dir    string
	ns     *natsserver.Server
	nc     *nats.Conn
	js     jetstream.JetStream
	schema *gojsonschema.Schema
	http   *http.Server
}

// placeOrderSchema returns the raw place-order/1.0 schema agentbus ships.
func placeOrderSchema() ([]byte, error) {
	return fs.ReadFile(config.ExampleCatalog(), "commands/place-order/1.0.json")
}

// startEmbeddedNATS runs a JetStream server in-process on dir (file storage),
// configured like agentbus's embedded one.
func startEmbeddedNATS(dir string) (*natsserver.Server, *nats.Conn, error) {
	ns, err := natsserver.NewServer(&natsserver.Options{
		ServerName: "bench-reference", JetStream: true, StoreDir: dir, NoSigs: true, NoLog: true,
		DontListen: true, JetStreamMaxMemory: 256 << 20, MaxPayload: 8 << 20,
	})
	if err != nil {
		return nil, nil, err
	}
	go ns.Start()
	if !ns.ReadyForConnections(30 * time.Second) {
		ns.Shutdown()
		return nil, nil, errors.New("reference nats-server not ready")
	}
	nc, err := nats.Connect("", nats.InProcessServer(ns))
	if err != nil {
		ns.Shutdown()
		return nil, nil, err
	}
	return ns, nc, nil
}

// start sets b up; on an error the caller stops what was started.
func (b *refBase) start(name string) error {
	dir, err := os.MkdirTemp("", "agentbus-bench-"+name+"-")
	if err != nil {
		return err
	}
	b.dir = dir
	doc, err := placeOrderSchema()
	if err != nil {
		return err
	}
	if b.schema, err = gojsonschema.NewSchema(gojsonschema.NewBytesLoader(doc)); err != nil {
		return err
	}
	if b.ns, b.nc, err = startEmbeddedNATS(dir); err != nil {
		return err
	}
	b.js, err = jetstream.New(b.nc)
	return err
}

// refCommand is what a reference reads of a command envelope.
type refCommand struct {
	ID     string          `json:"id"`
	Source string          `json:"source"`
	Data   json.RawMessage `json:"data"`
}

// command reads the request's envelope and validates its data; a bad one
// is a 400 for Echo to answer.
func (b *refBase) command(c echo.Context) ([]byte, refCommand, error) {
	var env refCommand
	body, err := io.ReadAll(io.LimitReader(c.Request().Body, 1<<20))
	if err != nil {
		return nil, env, echo.NewHTTPError(http.StatusBadRequest, "unreadable body")
	}
	if err := json.Unmarshal(body, &env); err != nil || len(env.Data) == 0 {
		return nil, env, echo.NewHTTPError(http.StatusBadRequest, "malformed envelope")
	}
	if res, err := b.schema.Validate(gojsonschema.NewBytesLoader(env.Data)); err != nil || !res.Valid() {
		return nil, env, echo.NewHTTPError(http.StatusBadRequest, "invalid data")
	}
	return body, env, nil
}

// serve answers POST /commands with handle, on a loopback port.
func (b *refBase) serve(handle echo.HandlerFunc) error {
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.POST("/commands", handle)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	b.URL = "http://" + ln.Addr().String()
	b.http = &http.Server{Handler: e, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 120 * time.Second}
	go func() { _ = b.http.Serve(ln) }()
	return nil
}

// stopHTTP ends the HTTP server, waiting for the requests in flight.
func (b *refBase) stopHTTP() {
	if b.http != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_ = b.http.Shutdown(ctx)
		cancel()
	}
}

// stopNATS ends the connection and the server and removes the store.
func (b *refBase) stopNATS() {
	if b.nc != nil {
		b.nc.Close()
	}
	if b.ns != nil {
		b.ns.Shutdown()
		b.ns.WaitForShutdown()
	}
	if b.dir == "" {
		return
	}
	if err := os.RemoveAll(b.dir); err != nil {
		fmt.Fprintln(os.Stderr, "bench: remove", b.dir, err)
	}
}

// refServer is the bare ingest reference: Echo, gojsonschema validation of
// data against the same place-order/1.0 schema (compiled once), and a
// synchronous JetStream publish to a file-storage stream on its own
// embedded nats-server. Nothing else: no envelope rules, no dedup lookup,
// no processor.
type refServer struct{ refBase }

func startReference() (*refServer, error) {
	r := &refServer{}
	if err := r.setUp(); err != nil {
		r.Stop()
		return nil, err
	}
	return r, nil
}

func (r *refServer) setUp() error {
	if err := r.start("ref"); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := r.js.CreateStream(ctx, jetstream.StreamConfig{
		Name: "REF_COMMANDS", Subjects: []string{"ref.cmd.>"}, Storage: jetstream.FileStorage,
	}); err != nil {
		return err
	}
	return r.serve(func(c echo.Context) error {
		body, env, err := r.command(c)
		if err != nil {
			return err
		}
		if _, err := r.js.Publish(c.Request().Context(), "ref.cmd.default.PlaceOrder", body); err != nil {
			return c.JSON(http.StatusInternalServerError, map[string]string{"error": err.Error()})
		}
		return c.JSON(http.StatusAccepted, map[string]string{"id": env.ID, "status": "accepted"})
	})
}

func (r *refServer) Stop() {
	r.stopHTTP()
	r.stopNATS()
}
