package interop_test

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	a2apbv0 "github.com/a2aproject/a2a-go/a2apb"
	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2aclient"
	"github.com/a2aproject/a2a-go/v2/a2aclient/agentcard"
	"github.com/a2aproject/a2a-go/v2/a2acompat/a2av0"
	a2agrpcv0 "github.com/a2aproject/a2a-go/v2/a2agrpc/v0"
	a2agrpc "github.com/a2aproject/a2a-go/v2/a2agrpc/v1"
	a2apb "github.com/a2aproject/a2a-go/v2/a2apb/v1"
	"github.com/a2aproject/a2a-go/v2/a2apb/v1/pbconv"
	"github.com/agentbus/agentbus/pkg/auth"
	"github.com/agentbus/agentbus/pkg/settings"
	a2atransport "github.com/agentbus/agentbus/pkg/transport/a2a"
	"github.com/agentbus/agentbus/test/testkit"
	"github.com/google/uuid"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

// grpcBearer sends a bearer credential in each call's metadata, over a
// connection without TLS (loopback).
type grpcBearer string

func (k grpcBearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(k)}, nil
}

func (grpcBearer) RequireTransportSecurity() bool { return false }

// grpcDial returns the dial options of a gRPC client sending key ("" for
// none).
func grpcDial(key string) []grpc.DialOption {
	opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	if key != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(grpcBearer(key)))
	}
	return opts
}

// a2aGRPCClient resolves the card at base and returns the SDK's client on
// its gRPC interface of version, sending key.
func a2aGRPCClient(t *testing.T, base, key string, version a2a.ProtocolVersion) (*a2aclient.Client, *a2a.AgentInterface) {
	t.Helper()
	ctx := context.Background()
	card, err := agentcard.NewResolver(bearerClient(key)).Resolve(ctx, base)
	if err != nil {
		t.Fatalf("resolve the agent card: %v", err)
	}
	var iface *a2a.AgentInterface
	for _, i := range card.SupportedInterfaces {
		if i.ProtocolBinding == a2a.TransportProtocolGRPC && i.ProtocolVersion == version {
			iface = i
		}
	}
	if iface == nil {
		t.Fatalf("the card has no gRPC %s interface: %+v", version, card.SupportedInterfaces)
	}
	c, err := a2aclient.NewFromEndpoints(ctx, []*a2a.AgentInterface{iface},
		a2agrpc.WithGRPCTransport(grpcDial(key)...), a2agrpcv0.WithGRPCTransport(grpcDial(key)...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Destroy() })
	return c, iface
}

// rawGRPC is the generated A2A 1.0 client on target, sending key.
func rawGRPC(t *testing.T, target, key string) a2apb.A2AServiceClient {
	t.Helper()
	conn, err := grpc.NewClient(target, grpcDial(key)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return a2apb.NewA2AServiceClient(conn)
}

// errorBody returns the code in the REST error body a status carries.
func errorBody(err error) string {
	for _, d := range status.Convert(err).Details() {
		if s, ok := d.(*structpb.Struct); ok {
			return s.GetFields()["code"].GetStringValue()
		}
	}
	return ""
}

// TestA2AGRPCTaskPerCommand: over the SDK's gRPC client, in A2A 1.0 and
// 0.3, on the HTTP listener, a command envelope starts a task whose id is
// its correlation id, completed with an artifact per event, equal to GET
// /events?correlationId=; the same order again fails its task with the
// rejection's code.
func TestA2AGRPCTaskPerCommand(t *testing.T) {
	t.Parallel()
	s := a2aServer(t)
	for _, version := range []a2a.ProtocolVersion{a2a.Version, a2av0.Version} {
		t.Run(string(version), func(t *testing.T) {
			c, iface := a2aGRPCClient(t, s.URL, a2aBootstrap, version)
			if iface.URL != strings.TrimPrefix(s.URL, "http://") {
				t.Fatalf("the gRPC interface is at %s, want the HTTP listener's host:port", iface.URL)
			}
			orderTwice(t, c, s.URL, "g-"+uuid.NewString()[:8])
		})
	}
}

// TestA2AGRPCStream: over gRPC a streamed command yields its task, its
// artifacts and its completion; subscribing to the finished task yields it
// whole, and GetTask reads it.
func TestA2AGRPCStream(t *testing.T) {
	t.Parallel()
	s := a2aServer(t)
	c, _ := a2aGRPCClient(t, s.URL, a2aBootstrap, a2a.Version)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	id := streamAndResubscribe(ctx, t, c, s.URL, "gs-")
	task, err := c.GetTask(ctx, &a2a.GetTaskRequest{ID: id})
	if err != nil || task.ID != id || task.Status.State != a2a.TaskStateCompleted {
		t.Fatalf("GetTask: %v %+v", err, task)
	}
	if _, err := c.GetTask(ctx, &a2a.GetTaskRequest{ID: "no-such-task"}); !errors.Is(err, a2a.ErrTaskNotFound) {
		t.Fatalf("GetTask of no task: %v, want task not found", err)
	}
}

// TestA2AGRPCCredentials: every gRPC method needs credentials
// (Unauthenticated, without one or with a wrong one, streams too); a
// read-only key cannot submit (PermissionDenied); an invalid command is
// InvalidArgument with REST's error body in the details.
func TestA2AGRPCCredentials(t *testing.T) {
	t.Parallel()
	s := a2aServer(t)
	target := strings.TrimPrefix(s.URL, "http://")
	ctx := context.Background()
	for name, key := range map[string]string{"no credential": "", "a wrong key": "ab_nosuchkey_0123456789abcdef0123456789abcdef"} {
		raw := rawGRPC(t, target, key)
		var hdr metadata.MD
		_, err := raw.GetTask(ctx, &a2apb.GetTaskRequest{Id: "x"}, grpc.Header(&hdr))
		if status.Code(err) != codes.Unauthenticated || errorBody(err) != "UNAUTHENTICATED" || len(hdr.Get("www-authenticate")) == 0 {
			t.Fatalf("GetTask with %s: %v (header %v), want Unauthenticated with the error body and a challenge", name, err, hdr)
		}
		_, err = raw.GetTaskPushNotificationConfig(ctx, &a2apb.GetTaskPushNotificationConfigRequest{TaskId: "x", Id: "y"})
		if status.Code(err) != codes.Unauthenticated {
			t.Fatalf("GetTaskPushNotificationConfig with %s: %v, want Unauthenticated", name, err)
		}
		stream, err := raw.SubscribeToTask(ctx, &a2apb.SubscribeToTaskRequest{Id: "x"})
		if err == nil {
			_, err = stream.Recv()
		}
		if status.Code(err) != codes.Unauthenticated {
			t.Fatalf("SubscribeToTask with %s: %v, want Unauthenticated", name, err)
		}
	}
	readOnly := testkit.Key(t, s, []string{"*"}, auth.ScopeRead)
	c, _ := a2aGRPCClient(t, s.URL, readOnly, a2a.Version)
	testkit.Eventually(t, "the new key works", func() bool {
		_, err := c.GetTask(ctx, &a2a.GetTaskRequest{ID: "no-such-task"})
		return errors.Is(err, a2a.ErrTaskNotFound)
	})
	if _, err := c.SendMessage(ctx, dataMessage(order("gr-1"))); !errors.Is(err, a2a.ErrUnauthorized) {
		t.Fatalf("a read-only key submitting: %v, want unauthorized", err)
	}
	raw := rawGRPC(t, target, readOnly)
	msg, err := pbconv.ToProtoSendMessageRequest(dataMessage(order("gr-2")))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := raw.SendMessage(ctx, msg); status.Code(err) != codes.PermissionDenied || errorBody(err) != "FORBIDDEN" {
		t.Fatalf("a read-only key submitting: %v, want PermissionDenied", err)
	}
	text := &a2apb.SendMessageRequest{Message: &a2apb.Message{MessageId: uuid.NewString(), Role: a2apb.Role_ROLE_USER,
		Parts: []*a2apb.Part{{Content: &a2apb.Part_Text{Text: "place an order"}}}}}
	if _, err := rawGRPC(t, target, a2aBootstrap).SendMessage(ctx, text); status.Code(err) != codes.InvalidArgument || errorBody(err) != "VALIDATION_FAILED" {
		t.Fatalf("a message without a data part: %v, want InvalidArgument with VALIDATION_FAILED", err)
	}
}

// TestA2AGRPCTenantIsolation: in multi-tenant mode each tenant's card
// names its gRPC interface with the tenant, which the SDK's client sends
// in each request; a task of one tenant is not found under the other, a
// key of one tenant is refused on the other, and a call naming no tenant
// is refused.
func TestA2AGRPCTenantIsolation(t *testing.T) {
	t.Parallel()
	s := a2aServer(t, func(c *settings.Config) { c.Tenancy.Mode, c.Tenancy.Tenants = "multi", []string{"acme", "globex"} })
	ctx := context.Background()
	acmeKey := testkit.Key(t, s, []string{"acme"}, auth.ScopeRead, auth.ScopeWrite)
	acme, iface := a2aGRPCClient(t, s.URL+"/acme", acmeKey, a2a.Version)
	if iface.Tenant != "acme" {
		t.Fatalf("acme's gRPC interface names tenant %q", iface.Tenant)
	}
	var res a2a.SendMessageResult
	testkit.Eventually(t, "the new key works", func() bool {
		var err error
		res, err = acme.SendMessage(ctx, dataMessage(order("gi-1")))
		return err == nil
	})
	id := res.(*a2a.Task).ID
	if got, err := acme.GetTask(ctx, &a2a.GetTaskRequest{ID: id}); err != nil || got.ID != id {
		t.Fatalf("acme's task under acme: %v", err)
	}
	globex, _ := a2aGRPCClient(t, s.URL+"/globex", a2aBootstrap, a2a.Version)
	if _, err := globex.GetTask(ctx, &a2a.GetTaskRequest{ID: id}); !errors.Is(err, a2a.ErrTaskNotFound) {
		t.Fatalf("acme's task read under globex: %v, want task not found", err)
	}
	raw := rawGRPC(t, strings.TrimPrefix(s.URL, "http://"), acmeKey)
	if _, err := raw.GetTask(ctx, &a2apb.GetTaskRequest{Tenant: "globex", Id: string(id)}); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("acme's key on globex: %v, want PermissionDenied", err)
	}
	if _, err := raw.GetTask(ctx, &a2apb.GetTaskRequest{Id: string(id)}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("no tenant named: %v, want InvalidArgument", err)
	}
	if _, err := raw.GetTask(ctx, &a2apb.GetTaskRequest{Tenant: "acme", Id: string(id)}); err != nil {
		t.Fatalf("acme's task by the generated client: %v", err)
	}
}

// TestA2AGRPCQuietStream: a gRPC stream stays open while its task waits
// longer than the HTTP server's read and write timeouts and a stream's
// write timeout (a command nobody processes, ShipOrder), then yields the
// event stored for it as an artifact and the completion.
func TestA2AGRPCQuietStream(t *testing.T) {
	t.Parallel()
	s := a2aServer(t, func(c *settings.Config) {
		c.Registry.WaitTimeout = settings.Duration(200 * time.Millisecond)
		c.HTTP.ReadHeaderTimeout = settings.Duration(500 * time.Millisecond)
		c.HTTP.ReadTimeout = settings.Duration(500 * time.Millisecond)
		c.HTTP.WriteTimeout = settings.Duration(500 * time.Millisecond)
		c.Push.WriteTimeout = settings.Duration(time.Second)
	})
	c, _ := a2aGRPCClient(t, s.URL, a2aBootstrap, a2a.Version)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req := dataMessage(map[string]any{"skill": "ShipOrder", "data": map[string]any{"orderId": "ts-o-2", "carrier": "dhl"}})
	var kinds []string
	for ev, err := range c.SendStreamingMessage(ctx, req) {
		if err != nil {
			t.Fatalf("stream after %v: %v", kinds, err)
		}
		switch e := ev.(type) {
		case *a2a.Task:
			kinds = append(kinds, "task:"+string(e.Status.State))
			time.Sleep(3 * time.Second) // quiet, past every timeout above
			publishShipped(t, s, string(e.ID))
		case *a2a.TaskArtifactUpdateEvent:
			kinds = append(kinds, "artifact:"+e.Artifact.Name)
		case *a2a.TaskStatusUpdateEvent:
			kinds = append(kinds, "status:"+string(e.Status.State))
		}
	}
	want := []string{"task:" + string(a2a.TaskStateSubmitted), "artifact:OrderShipped", "status:" + string(a2a.TaskStateCompleted)}
	if !slices.Equal(kinds, want) {
		t.Fatalf("the stream yielded %v, want %v", kinds, want)
	}
}

// TestA2AGRPCAPIKeyMetadata: with API-key authentication the key is sent
// in the metadata entry named by auth.scheme, for apikey-query too (gRPC
// has no query); without authentication no credential is needed.
func TestA2AGRPCAPIKeyMetadata(t *testing.T) {
	t.Parallel()
	for typ, name := range map[string]string{"apikey-header": auth.DefaultHeaderScheme, "apikey-query": auth.DefaultQueryScheme, "none": ""} {
		t.Run(typ, func(t *testing.T) {
			t.Parallel()
			s := a2aServer(t, func(c *settings.Config) { c.Auth.Type = typ })
			conn, err := grpc.NewClient(strings.TrimPrefix(s.URL, "http://"), grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			raw := a2apb.NewA2AServiceClient(conn)
			ctx := context.Background()
			if name == "" {
				if _, err := raw.GetTask(ctx, &a2apb.GetTaskRequest{Id: "x"}); status.Code(err) != codes.NotFound {
					t.Fatalf("no credential, none needed: %v, want NotFound", err)
				}
				return
			}
			if _, err := raw.GetTask(ctx, &a2apb.GetTaskRequest{Id: "x"}); status.Code(err) != codes.Unauthenticated {
				t.Fatalf("no key: %v, want Unauthenticated", err)
			}
			with := metadata.AppendToOutgoingContext(ctx, strings.ToLower(name), a2aBootstrap)
			if _, err := raw.GetTask(with, &a2apb.GetTaskRequest{Id: "x"}); status.Code(err) != codes.NotFound || errorBody(err) != "TRACE_NOT_FOUND" {
				t.Fatalf("the key in %s: %v, want NotFound", name, err)
			}
		})
	}
}

// TestA2AGRPCTenantMetadata: A2A 0.3's gRPC messages have no tenant
// field; in multi-tenant mode the agentbus-tenant metadata names it.
func TestA2AGRPCTenantMetadata(t *testing.T) {
	t.Parallel()
	s := a2aServer(t, func(c *settings.Config) { c.Tenancy.Mode, c.Tenancy.Tenants = "multi", []string{"acme", "globex"} })
	acme, _ := a2aGRPCClient(t, s.URL+"/acme", a2aBootstrap, a2a.Version)
	ctx := context.Background()
	res, err := acme.SendMessage(ctx, dataMessage(order("gm-1")))
	if err != nil {
		t.Fatal(err)
	}
	id := res.(*a2a.Task).ID
	conn, err := grpc.NewClient(strings.TrimPrefix(s.URL, "http://"), grpcDial(a2aBootstrap)...)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	v03 := a2apbv0.NewA2AServiceClient(conn)
	name := "tasks/" + string(id)
	if _, err := v03.GetTask(ctx, &a2apbv0.GetTaskRequest{Name: name}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("0.3 without a tenant: %v, want InvalidArgument", err)
	}
	for tenant, want := range map[string]codes.Code{"acme": codes.OK, "globex": codes.NotFound} {
		md := metadata.AppendToOutgoingContext(ctx, a2atransport.TenantMetadata, tenant)
		if _, err := v03.GetTask(md, &a2apbv0.GetTaskRequest{Name: name}); status.Code(err) != want {
			t.Fatalf("0.3 GetTask under %s: %v, want %s", tenant, err, want)
		}
	}
}

// rawBytes is a gRPC codec that sends and receives messages as the bytes
// given, so that a test can send what a protobuf library would not write.
type rawBytes struct{}

func (rawBytes) Name() string { return "proto" }
func (rawBytes) Marshal(v any) ([]byte, error) {
	return *v.(*[]byte), nil
}
func (rawBytes) Unmarshal(data []byte, v any) error {
	*v.(*[]byte) = append([]byte(nil), data...)
	return nil
}

// TestA2AGRPCRefusesInvalidUTF8: a gRPC message whose data part holds a
// string of invalid UTF-8 is refused by protobuf's decoder before any
// handler runs (proto3 strings are checked UTF-8), as JSON-RPC and
// HTTP+JSON answer it MALFORMED_JSON; nothing is queued.
func TestA2AGRPCRefusesInvalidUTF8(t *testing.T) {
	t.Parallel()
	s := a2aServer(t)
	target := strings.TrimPrefix(s.URL, "http://")
	before := testkit.StreamState(t, s.Conn.JS, "AGENTBUS_COMMANDS").Msgs
	msg, err := pbconv.ToProtoSendMessageRequest(dataMessage(map[string]any{"skill": "AddNote", "data": map[string]any{"text": "cafZ"}}))
	if err != nil {
		t.Fatal(err)
	}
	good, err := proto.Marshal(msg)
	if err != nil {
		t.Fatal(err)
	}
	bad := bytes.Replace(good, []byte("cafZ"), []byte("caf\xff"), 1)
	if bytes.Equal(good, bad) {
		t.Fatal("the placeholder is not in the encoded message")
	}
	conn, err := grpc.NewClient(target, grpcDial(a2aBootstrap)...)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var out []byte
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = conn.Invoke(ctx, "/lf.a2a.v1.A2AService/SendMessage", &bad, &out, grpc.ForceCodec(rawBytes{}))
	if err == nil || !strings.Contains(status.Convert(err).Message(), "UTF-8") {
		t.Fatalf("invalid UTF-8 over gRPC: %v, want a refusal naming UTF-8", err)
	}
	// The same bytes with valid UTF-8 are taken: the refusal is the
	// UTF-8's.
	if err := conn.Invoke(ctx, "/lf.a2a.v1.A2AService/SendMessage", &good, &out, grpc.ForceCodec(rawBytes{})); err != nil {
		t.Fatalf("the same message in valid UTF-8: %v", err)
	}
	if after := testkit.StreamState(t, s.Conn.JS, "AGENTBUS_COMMANDS").Msgs; after != before+1 {
		t.Fatalf("the command log grew from %d to %d, want by the valid message only", before, after)
	}
}
