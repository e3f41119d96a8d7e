package a2a

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"
	a2agrpcv0 "github.com/a2aproject/a2a-go/v2/a2agrpc/v0"
	a2agrpc "github.com/a2aproject/a2a-go/v2/a2agrpc/v1"
	"github.com/agentbus/agentbus/pkg/auth"
	"github.com/agentbus/agentbus/pkg/envelope"
	"github.com/agentbus/agentbus/pkg/errs"
	"github.com/agentbus/agentbus/pkg/transport/web"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

// TenantMetadata is the gRPC metadata key naming the tenant of a call in
// multi-tenant mode when its request has no tenant field (A2A 0.3's
// messages have none; A2A 1.0's "tenant" field is read first).
const TenantMetadata = "agentbus-tenant"

// IsGRPC reports whether r is a gRPC call: HTTP/2 with a gRPC content
// type. The server routes those to GRPCHandler, everything else to Echo.
func IsGRPC(r *http.Request) bool {
	return r.ProtoMajor == 2 && strings.HasPrefix(r.Header.Get("Content-Type"), "application/grpc")
}

// GRPCHandler returns the SDK's gRPC bindings (the A2A 1.0 service
// lf.a2a.v1.A2AService and the 0.3 one, a2a.v1.A2AService) as an
// http.Handler for the HTTP/2 requests IsGRPC picks out, on the same
// request handler as the other bindings. Each call authenticates as the
// other bindings do (the credential in the metadata: "authorization:
// Bearer …", or the API-key header; with apikey-query, the metadata entry
// named like the query parameter), then is admitted and its tenant
// checked (the request's tenant field, else TenantMetadata); failures are
// gRPC statuses mapped through errorOf, with the error body
// (errs.BodyOf) as a detail.
func (t *Transport) GRPCHandler() http.Handler {
	s := grpc.NewServer(grpc.ChainUnaryInterceptor(t.unaryRecover, t.unaryGuard), grpc.ChainStreamInterceptor(t.streamRecover, t.streamGuard),
		grpc.MaxRecvMsgSize(int(t.cfg.BodyLimit)))
	a2agrpc.NewHandler(t.h).RegisterWith(s)
	a2agrpcv0.NewHandler(t.h).RegisterWith(s)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cred := r
		if t.guard.Method() == auth.MethodAPIKeyQuery {
			cred = r.Clone(r.Context())
			cred.URL.RawQuery = ""
			if v := r.Header.Get(t.guard.Scheme()); v != "" {
				cred.URL.RawQuery = url.Values{t.guard.Scheme(): {v}}.Encode()
			}
		}
		a := &grpcAuth{}
		a.p, a.err = t.guard.Authenticate(cred)
		if a.err != nil {
			if ch := t.guard.Challenge(a.err); ch != "" {
				w.Header().Set("WWW-Authenticate", ch)
			}
			// Refused before the request message is read: a trailers-only
			// answer with the status the interceptors would give.
			refuseGRPC(w, toGRPC(toA2A(r.Context(), t.log, a.err)))
			return
		}
		// No deadline but while writing: a stream may be quiet for long,
		// a reader that stops reading is cut off.
		_ = http.NewResponseController(w).SetWriteDeadline(time.Time{})
		s.ServeHTTP(&web.StreamWriter{ResponseWriter: w, Timeout: t.cfg.StreamWriteTimeout},
			r.WithContext(context.WithValue(r.Context(), grpcAuthKey{}, a)))
	})
}

// refuseGRPC answers a gRPC call with err's status and no message,
// reading nothing of the request: the headers (a challenge among them)
// and then the status, its message and details as trailers.
func refuseGRPC(w http.ResponseWriter, err error) {
	st, _ := status.FromError(err)
	h := w.Header()
	h.Set("Content-Type", "application/grpc")
	w.WriteHeader(http.StatusOK)
	h.Set(http.TrailerPrefix+"Grpc-Status", strconv.Itoa(int(st.Code())))
	h.Set(http.TrailerPrefix+"Grpc-Message", url.PathEscape(st.Message()))
	if b, err := proto.Marshal(st.Proto()); err == nil {
		h.Set(http.TrailerPrefix+"Grpc-Status-Details-Bin", base64.RawStdEncoding.EncodeToString(b))
	}
}

// grpcAuth is the outcome of authenticating a gRPC call's HTTP request,
// read by the interceptors.
type grpcAuth struct {
	p   *auth.Principal
	err error
}

type grpcAuthKey struct{}

// enterGRPC admits a call whose request is msg: its caller authenticated,
// within its rate, on a tenant it may use that exists. It returns the
// context the handler runs in (the caller in it, ended at shutdown) and
// the function that releases it.
func (t *Transport) enterGRPC(ctx context.Context, msg any) (context.Context, func(), error) {
	fail := func(err error) (context.Context, func(), error) {
		return nil, nil, toGRPC(toA2A(ctx, t.log, err))
	}
	a, _ := ctx.Value(grpcAuthKey{}).(*grpcAuth)
	if a == nil {
		return fail(errs.New(errs.CodeUnauthenticated, "credentials are required"))
	}
	if a.err != nil {
		return fail(a.err)
	}
	if err := t.guard.Admit(a.p); err != nil {
		return fail(err)
	}
	tenant, err := t.grpcTenant(ctx, msg)
	if err != nil {
		return fail(err)
	}
	cl, err := t.enter(ctx, a.p, tenant)
	if err != nil {
		return fail(err)
	}
	cl.grpc = true // its errors are gRPC statuses (toA2A)
	ctx, release := t.callContext(ctx, cl)
	return ctx, release, nil
}

// grpcTenant returns the tenant a call addresses: the default one, or in
// multi-tenant mode the request's tenant field, else TenantMetadata.
func (t *Transport) grpcTenant(ctx context.Context, msg any) (string, error) {
	var field, meta string
	if m, ok := msg.(interface{ GetTenant() string }); ok {
		field = m.GetTenant()
	}
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		if v := md.Get(TenantMetadata); len(v) > 0 {
			meta = v[0]
		}
	}
	if field != "" && meta != "" && field != meta {
		return "", errs.Invalid("two tenants named", []errs.Violation{{Path: "tenant", Message: "differs from the " + TenantMetadata + " metadata"}})
	}
	id := cmp.Or(field, meta)
	if !t.cfg.MultiTenant {
		if id != "" && id != envelope.DefaultTenant {
			return "", errs.Invalid("invalid tenant", []errs.Violation{{Path: "tenant", Message: "this agentbus serves one tenant: leave it empty"}})
		}
		return envelope.DefaultTenant, nil
	}
	if !envelope.ValidTenant(id) {
		return "", errs.Invalid("invalid tenant id", []errs.Violation{{Path: "tenant", Message: "must match [a-z0-9][a-z0-9-]{0,62} (the request's tenant field, or the " + TenantMetadata + " metadata)"}})
	}
	return id, nil
}

// unaryRecover and streamRecover turn a panic under a call into an
// INTERNAL_ERROR, logged: grpc-go runs each call in a goroutine of its own,
// out of reach of net/http's recovery, and a panic there would end the
// process.
func (t *Transport) unaryRecover(ctx context.Context, req any, info *grpc.UnaryServerInfo, next grpc.UnaryHandler) (resp any, err error) {
	defer t.recovered(ctx, info.FullMethod, &err)
	return next(ctx, req)
}

func (t *Transport) streamRecover(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, next grpc.StreamHandler) (err error) {
	defer t.recovered(ss.Context(), info.FullMethod, &err)
	return next(srv, ss)
}

func (t *Transport) recovered(ctx context.Context, method string, err *error) {
	if p := recover(); p != nil {
		t.log.Error("a2a: a gRPC call panicked", "method", method, "panic", p, "stack", string(debug.Stack()))
		*err = toGRPC(toA2A(ctx, t.log, errs.Internal(fmt.Errorf("panic in %s", method))))
	}
}

func (t *Transport) unaryGuard(ctx context.Context, req any, _ *grpc.UnaryServerInfo, next grpc.UnaryHandler) (any, error) {
	ctx, done, err := t.enterGRPC(ctx, req)
	if err != nil {
		return nil, err
	}
	defer done()
	return next(ctx, req)
}

// streamGuard admits a streaming call once its request is read (every A2A
// stream is server-streaming: one request, then the events).
func (t *Transport) streamGuard(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, next grpc.StreamHandler) error {
	gs := &guardedStream{ServerStream: ss, t: t}
	defer func() {
		if gs.done != nil {
			gs.done()
		}
	}()
	return next(srv, gs)
}

type guardedStream struct {
	grpc.ServerStream
	t    *Transport
	ctx  context.Context
	done func()
}

func (s *guardedStream) Context() context.Context {
	if s.ctx != nil {
		return s.ctx
	}
	return s.ServerStream.Context()
}

func (s *guardedStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	if s.ctx == nil {
		ctx, done, err := s.t.enterGRPC(s.ServerStream.Context(), m)
		if err != nil {
			return err
		}
		s.ctx, s.done = ctx, done
	}
	return nil
}

// toGRPC turns an error of agentbus's (an A2A error from toA2A, the error
// body in its details) into the gRPC status errorOf maps its code
// to, with the body as a google.protobuf.Struct detail and the A2A
// ErrorInfo after it, as the SDK lays out its own statuses. Any other
// error is left to the SDK's mapping.
func toGRPC(err error) error {
	var ae *a2a.Error
	if err == nil || !errors.As(err, &ae) {
		return err
	}
	code, _ := ae.Details["code"].(string)
	m, ok := errorOf[errs.Code(code)]
	if !ok {
		return err
	}
	st := status.New(m.grpc, ae.Message)
	var body map[string]any // plain JSON values, as structpb takes them
	b, jerr := json.Marshal(ae.Details)
	if jerr == nil {
		jerr = json.Unmarshal(b, &body)
	}
	s, serr := structpb.NewStruct(body)
	if jerr != nil || serr != nil {
		return st.Err()
	}
	with, derr := st.WithDetails(s, &errdetails.ErrorInfo{Reason: a2a.ErrorReason(m.a2a), Domain: a2a.ProtocolDomain})
	if derr != nil {
		return st.Err()
	}
	return with.Err()
}
