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
	pageOf := func(c echo.Context) (console.Page, error) {
		if !rc.MultiTenant {
			return console.Page{Root: prefix}, nil
		}
		t, err := web.TenantParam(c)
		return console.Page{Root: prefix, Tenant: t}, err
	}
	rest.GetAndHead(e, routes[0], func(c echo.Context) error {
		pg, err := pageOf(c)
		if err != nil {
			return err
		}
		console.Secure(c.Response().Header())
		return c.Redirect(http.StatusMovedPermanently, pg.Base())
	})
	rest.GetAndHead(e, routes[1], func(c echo.Context) error {
		pg, err := pageOf(c)
		if err != nil {
			return err
		}
		console.Serve(c.Response(), c.Request(), pg, c.Param("*"))
		return nil
	})
	return routes
}
