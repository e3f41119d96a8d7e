package ingest

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/catalog"
	"github.com/agentbus/agentbus/pkg/envelope"
	"github.com/agentbus/agentbus/pkg/errs"
)

// Event injection (POST /events) is for testing and simulation only. It is
// off unless Config.AllowInjection is set, needs the admin scope, and keeps
// injected events apart from production: they go to the synthetic stream
// (subject <prefix>.syn.<tenant>._._.<EventType>, header
// Agentbus-Synthetic: true), which no production consumer, subscription or
// default read sees. GET /events?synthetic=true lists them.

// InjectionOff is the answer to an injection while it is turned off.
const InjectionOff = "event injection (POST /events) is turned off; an operator can allow it with events.allowInjection (--allow-event-injection)"

// InjectEvent validates raw as an event envelope and stores it as a
// synthetic event of tenant, returning its id. The envelope is checked like
// a command's (envelope.Decode), and its data against the data rules
// (envelope.DecodeData) whatever its schema; when dataschema names a schema of the
// event catalogue ("{schema}/{version}", or the absolute URL agentbus
// publishes for it), the type must match, data must validate, and the
// event is stored with that absolute URL. Other http(s) URLs are kept as
// given; one under agentbus's own URL must be one of tenant's event
// schemas. Injecting the same (source, id) again
// within the duplicate window stores nothing new. Errors:
// CAPABILITY_NOT_SUPPORTED when injection is off, MALFORMED_JSON,
// VALIDATION_FAILED, or an internal error when the store fails.
func (in *Ingest) InjectEvent(ctx context.Context, tenant string, raw []byte) (string, error) {
	if !in.cfg.AllowInjection {
		return "", errs.New(errs.CodeCapabilityNotSupported, InjectionOff)
	}
	env, err := envelope.Decode(raw, envelope.Event)
	if err != nil {
		return "", err
	}
	// The data rules hold whatever the schema, or none.
	if v := envelope.CheckData(env.Data, "$.data"); len(v) > 0 {
		return "", errs.Invalid("the envelope is invalid", v)
	}
	if env.DataSchema, err = in.checkInjected(tenant, env); err != nil {
		return "", err
	}
	msg := &bus.Message{
		Subject: in.subj.Event(bus.RootSynthetic, tenant, "", "", env.Type),
		Header: bus.Header{
			// Tenant-scoped, so one tenant's id never deduplicates another's.
			bus.HeaderMsgID:     {envelope.CorrelationID(tenant, env.Source, env.ID)},
			bus.HeaderSynthetic: {"true"},
			bus.HeaderTenant:    {tenant},
		},
		Data: env.Marshal(),
	}
	if env.DataSchema != "" {
		msg.Header.Set(bus.HeaderSchema, env.DataSchema)
	}
	_, err = in.p.Synthetic.Append(ctx, []*bus.Message{msg}, nil)
	if err != nil && !errors.Is(err, errs.ErrDuplicate) {
		return "", errs.Internal(fmt.Errorf("store synthetic event: %w", err))
	}
	return env.ID, nil
}

// checkInjected validates data against the catalogue schema dataschema
// names, when it names one of agentbus's own, and returns the dataschema to
// store: the absolute URL agentbus serves that schema at (what its own
// events carry, and resolvable, as the spec asks), or another URL as given.
// A URL under agentbus's own base that is not one of tenant's event
// schemas — another tenant's, a command's — is refused.
func (in *Ingest) checkInjected(tenant string, env *envelope.Envelope) (string, error) {
	if env.DataSchema == "" {
		return "", nil
	}
	bad := func(format string, args ...any) (string, error) {
		return "", errs.Invalid("the envelope is invalid", []errs.Violation{{Path: "$.dataschema", Message: fmt.Sprintf(format, args...)}})
	}
	ref, own := in.ownSchemaRef(tenant, env.DataSchema)
	if !own {
		if strings.HasPrefix(env.DataSchema, in.cfg.Schemas.Base+"/") {
			return bad("is under agentbus's own URL but not a schema of this tenant's event catalogue (%s…)", in.cfg.Schemas.Dir(tenant, catalog.KindEvent))
		}
		return env.DataSchema, nil
	}
	schema, version, ok := envelope.ParseDataSchema(ref)
	if !ok {
		return bad("is not a schema of the event catalogue")
	}
	e, ok := in.cat.Event(schema, version)
	if !ok || !e.Typed() {
		return bad("%s/%s is not in the event catalogue (GET /events?view=catalog lists it)", schema, version)
	}
	if e.Type != env.Type {
		return bad("%s/%s is the schema of %s, not of %s", schema, version, e.Type, env.Type)
	}
	if v := e.Validate(env.Data); len(v) > 0 {
		return "", errs.Invalid(fmt.Sprintf("data does not match %s/%s", e.Schema, e.Version), v)
	}
	return in.cfg.Schemas.Schema(tenant, catalog.KindEvent, e), nil
}

// ownSchemaRef returns the "{schema}/{version}" part of a dataschema that
// refers to tenant's event catalogue: a relative reference, or the absolute
// URL SchemaURL builds for tenant.
func (in *Ingest) ownSchemaRef(tenant, ds string) (string, bool) {
	if !strings.Contains(ds, ":") && !strings.HasPrefix(ds, "/") {
		return ds, true // relative {schema}/{version}
	}
	if rest, ok := strings.CutPrefix(ds, in.cfg.Schemas.Dir(tenant, catalog.KindEvent)); ok {
		return rest, true
	}
	return "", false
}
