package server

import (
	"net/http"
	"net/url"
	"strings"

	"github.com/agentbus/agentbus/pkg/console"
	"github.com/agentbus/agentbus/pkg/transport/rest"
	"github.com/agentbus/agentbus/pkg/transport/web"
	"github.com/labstack/echo/v4"
)

// consoleRoutes are the console's routes as Echo registers them: public
// (static files that hold no data; every call the console makes is an
// operation, guarded as any other).
func consoleRoutes(multi bool) []string {
	prefix := ""
	if multi {
		prefix = "/:tenantId"
	}
	return []string{prefix + "/console", prefix + console.Path + "*"}
}

// mountConsole serves the web console on e when console.enabled: at
// /console/ or, in multi-tenant mode, at /{tenantId}/console/ for any
// well-formed tenant id (the page holds nothing of the tenant; the API
// checks the tenant of every call). /console redirects to /console/. The
// paths the page names start with the path of the public URL, if any.
func (s *Server) mountConsole(e *echo.Echo, rc rest.Config) []string {
	if !s.cfg.Console.Enabled {
		return nil
	}
	routes := consoleRoutes(rc.MultiTenant)
	// Behind a proxy that serves agentbus under a path (publicUrl
	// https://host/agentbus), the browser sees every path under it.
	prefix := ""
	if u, err := url.Parse(s.cfg.Endpoint()); err == nil {
		prefix = strings.TrimSuffix(u.EscapedPath(), "/")
	}
	bases := func(c echo.Context) (string, string, error) {
		if !rc.MultiTenant {
			return prefix + console.Path, prefix, nil
		}
		t, err := web.TenantParam(c)
		if err != nil {
			return "", "", err
		}
		return prefix + "/" + t + console.Path, prefix + "/" + t, nil
	}
	rest.GetAndHead(e, routes[0], func(c echo.Context) error {
		base, _, err := bases(c)
		if err != nil {
			return err
		}
		console.Secure(c.Response().Header())
		return c.Redirect(http.StatusMovedPermanently, base)
	})
	rest.GetAndHead(e, routes[1], func(c echo.Context) error {
		base, api, err := bases(c)
		if err != nil {
			return err
		}
		console.Serve(c.Response(), c.Request(), base, api, c.Param("*"))
		return nil
	})
	return routes
}
