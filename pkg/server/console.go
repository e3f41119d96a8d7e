package server

import (
	"net/http"

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
// checks the tenant of every call). /console redirects to /console/.
func (s *Server) mountConsole(e *echo.Echo, rc rest.Config) []string {
	if !s.cfg.Console.Enabled {
		return nil
	}
	routes := consoleRoutes(rc.MultiTenant)
	bases := func(c echo.Context) (string, string, error) {
		if !rc.MultiTenant {
			return console.Path, "", nil
		}
		t, err := web.TenantParam(c)
		if err != nil {
			return "", "", err
		}
		return "/" + t + console.Path, "/" + t, nil
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
