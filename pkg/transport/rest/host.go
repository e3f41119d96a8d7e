package rest

import (
	"net"
	"strings"

	"github.com/agentbus/agentbus/pkg/errs"
	"github.com/labstack/echo/v4"
)

// checkHost returns the middleware that refuses a request whose Host is
// neither an IP address nor one of names (Config.Hosts).
func checkHost(names []string) echo.MiddlewareFunc {
	allowed := make(map[string]bool, len(names))
	for _, n := range names {
		allowed[hostName(n)] = true
	}
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			if h := hostName(c.Request().Host); h != "" && !allowed[h] && net.ParseIP(h) == nil {
				return errs.New(errs.CodeForbidden, "this server answers without credentials only to its own host name and loopback names, not %q", errs.Clip(h))
			}
			return next(c)
		}
	}
}

// hostName is the host of a Host header value, lower case, without port,
// brackets or a final dot.
func hostName(hostport string) string {
	h := hostport
	if host, _, err := net.SplitHostPort(hostport); err == nil {
		h = host
	}
	h = strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")
	return strings.ToLower(strings.TrimSuffix(h, "."))
}
