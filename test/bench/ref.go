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

// refServer is the bare reference: Echo, gojsonschema validation of data
// against the same place-order/1.0 schema (compiled once), and a synchronous
// JetStream publish to a file-storage stream on its own embedded nats-server.
// Nothing else: no envelope rules, no dedup lookup, no processor.
type refServer struct {
	URL  string
	dir  string
	ns   *natsserver.Server
	nc   *nats.Conn
	http *http.Server
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

func startReference() (*refServer, error) {
	dir, err := os.MkdirTemp("", "agentbus-bench-ref-")
	if err != nil {
		return nil, err
	}
	r := &refServer{dir: dir}
	ok := false
	defer func() {
		if !ok {
			r.Stop()
		}
	}()
	doc, err := placeOrderSchema()
	if err != nil {
		return nil, err
	}
	schema, err := gojsonschema.NewSchema(gojsonschema.NewBytesLoader(doc))
	if err != nil {
		return nil, err
	}
	if r.ns, r.nc, err = startEmbeddedNATS(dir); err != nil {
		return nil, err
	}
	js, err := jetstream.New(r.nc)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name: "REF_COMMANDS", Subjects: []string{"ref.cmd.>"}, Storage: jetstream.FileStorage,
	}); err != nil {
		return nil, err
	}

	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.POST("/commands", func(c echo.Context) error {
		req := c.Request()
		body, err := io.ReadAll(io.LimitReader(req.Body, 1<<20))
		if err != nil {
			return c.JSON(http.StatusBadRequest, map[string]string{"error": "unreadable body"})
		}
		var env struct {
			ID   string          `json:"id"`
			Data json.RawMessage `json:"data"`
		}
		if err := json.Unmarshal(body, &env); err != nil || len(env.Data) == 0 {
			return c.JSON(http.StatusBadRequest, map[string]string{"error": "malformed envelope"})
		}
		res, err := schema.Validate(gojsonschema.NewBytesLoader(env.Data))
		if err != nil || !res.Valid() {
			return c.JSON(http.StatusBadRequest, map[string]string{"error": "invalid data"})
		}
		if _, err := js.Publish(req.Context(), "ref.cmd.default.PlaceOrder", body); err != nil {
			return c.JSON(http.StatusInternalServerError, map[string]string{"error": err.Error()})
		}
		return c.JSON(http.StatusAccepted, map[string]string{"id": env.ID, "status": "accepted"})
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	r.URL = "http://" + ln.Addr().String()
	r.http = &http.Server{Handler: e, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 120 * time.Second}
	go func() { _ = r.http.Serve(ln) }()
	ok = true
	return r, nil
}

func (r *refServer) Stop() {
	if r.http != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_ = r.http.Shutdown(ctx)
		cancel()
	}
	if r.nc != nil {
		r.nc.Close()
	}
	if r.ns != nil {
		r.ns.Shutdown()
		r.ns.WaitForShutdown()
	}
	if err := os.RemoveAll(r.dir); err != nil {
		fmt.Fprintln(os.Stderr, "bench: remove", r.dir, err)
	}
}
