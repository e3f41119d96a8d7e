// Package web holds what the transports served over HTTP share and none
// owns: the JSON media-type check, the path parameters as a client encoded
// them (the tenant's among them), and the writer of long answers. It is
// not a transport: REST, MCP and A2A import it, it imports none of them.
package web

import (
	"mime"
	"net/url"
	"strings"

	"github.com/agentbus/agentbus/pkg/envelope"
	"github.com/agentbus/agentbus/pkg/errs"
	"github.com/labstack/echo/v4"
)

// PathParam returns route parameter name of c, percent-decoded. Echo routes
// on the raw path when the request has one (net/url keeps it when decoding
// would lose something, "%61bc" or "a%2Fb"), and hands its parameters over
// as the client encoded them; otherwise it routes on the decoded path, whose
// parameters must not be decoded again ("a%25" is "a%").
func PathParam(c echo.Context, name string) (string, error) {
	if c.Request().URL.RawPath == "" {
		return c.Param(name), nil
	}
	v, err := url.PathUnescape(c.Param(name))
	if err != nil {
		return "", errs.Invalid("invalid path", []errs.Violation{{Path: name, Message: "is not valid percent-encoding"}})
	}
	return v, nil
}

// TenantParam returns the {tenantId} of a multi-tenant route, or the
// VALIDATION_FAILED error of an invalid one.
func TenantParam(c echo.Context) (string, error) {
	t, err := PathParam(c, "tenantId")
	if err != nil {
		return "", err
	}
	if !envelope.ValidTenant(t) {
		return "", errs.Invalid("invalid tenant id", []errs.Violation{{Path: "tenantId", Message: "must match [a-z0-9][a-z0-9-]{0,62}"}})
	}
	return t, nil
}

// JSONMediaType returns UNSUPPORTED_MEDIA_TYPE unless ct, a request's
// Content-Type, is application/json in UTF-8: a cross-site form must not
// reach an endpoint that acts.
func JSONMediaType(ct string) error {
	if ct == "application/json" { // the usual header needs no parsing
		return nil
	}
	mt, params, err := mime.ParseMediaType(ct)
	if ct == "" || err != nil || mt != "application/json" {
		return errs.New(errs.CodeUnsupportedMediaType, "the request body must be application/json (got %q)", errs.Clip(ct))
	}
	if cs, ok := params["charset"]; ok && !strings.EqualFold(cs, "utf-8") {
		return errs.New(errs.CodeUnsupportedMediaType, "the request body must be UTF-8 encoded (got charset %q)", errs.Clip(cs))
	}
	return nil
}
