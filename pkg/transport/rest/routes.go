package rest

import (
	"fmt"
	"net/http"
	"regexp"
	"slices"

	"github.com/agentbus/agentbus/pkg/ops"
)

// Route is how the REST transport exposes one operation.
type Route struct {
	Method string
	// Path is relative to the (tenant) base, "{name}" for a parameter of
	// the operation; its other parameters are query parameters.
	Path string
	// Select, when set, names the query parameter and value that pick this
	// operation among those sharing its method and path (GET /events with
	// view=catalog is listEventCatalog). The operation without Select is
	// the route's default.
	Select [2]string
}

// Status is the HTTP status of an outcome.
func Status(o ops.Outcome) int {
	switch o {
	case ops.Created:
		return http.StatusCreated
	case ops.Queued:
		return http.StatusAccepted
	case ops.Empty:
		return http.StatusNoContent
	}
	return http.StatusOK
}

// Routes is the REST binding of every operation of the table, by operation
// id; the README lists the paths ("What the API does" and after).
var Routes = map[string]Route{
	"submitCommand":         {Method: http.MethodPost, Path: "/commands"},
	"listCommandCatalog":    {Method: http.MethodGet, Path: "/commands"},
	"getCommandSchema":      {Method: http.MethodGet, Path: "/commands/{schema}/{version}"},
	"listEvents":            {Method: http.MethodGet, Path: "/events"},
	"listEventCatalog":      {Method: http.MethodGet, Path: "/events", Select: [2]string{"view", "catalog"}},
	"injectEvent":           {Method: http.MethodPost, Path: "/events"},
	"getEventSchema":        {Method: http.MethodGet, Path: "/events/{schema}/{version}"},
	"registerAgent":         {Method: http.MethodPost, Path: "/agents"},
	"listAgents":            {Method: http.MethodGet, Path: "/agents"},
	"getAgent":              {Method: http.MethodGet, Path: "/agents/{id}"},
	"pauseAgent":            {Method: http.MethodPost, Path: "/agents/{id}/pause"},
	"resumeAgent":           {Method: http.MethodPost, Path: "/agents/{id}/resume"},
	"deleteAgent":           {Method: http.MethodDelete, Path: "/agents/{id}"},
	"registerService":       {Method: http.MethodPost, Path: "/services"},
	"listServices":          {Method: http.MethodGet, Path: "/services"},
	"getService":            {Method: http.MethodGet, Path: "/services/{id}"},
	"deleteService":         {Method: http.MethodDelete, Path: "/services/{id}"},
	"getTrace":              {Method: http.MethodGet, Path: "/traces/{id}"},
	"listDeliveries":        {Method: http.MethodGet, Path: "/subscriptions/{id}/deliveries"},
	"redeliverSubscription": {Method: http.MethodPost, Path: "/subscriptions/{id}/redeliver"},
	"replaySubscription":    {Method: http.MethodPost, Path: "/subscriptions/{id}/replay"},

	"createSubscription":       {Method: http.MethodPost, Path: "/subscriptions"},
	"listSubscriptions":        {Method: http.MethodGet, Path: "/subscriptions"},
	"getSubscription":          {Method: http.MethodGet, Path: "/subscriptions/{id}"},
	"deleteSubscription":       {Method: http.MethodDelete, Path: "/subscriptions/{id}"},
	"getSubscriptionSecret":    {Method: http.MethodGet, Path: "/subscriptions/{id}/secret"},
	"rotateSubscriptionSecret": {Method: http.MethodPost, Path: "/subscriptions/{id}/secret"},
	"enableSubscription":       {Method: http.MethodPost, Path: "/subscriptions/{id}/enable"},
}

// Endpoint is an operation bound to its route.
type Endpoint struct {
	ops.Operation
	Route
}

// Status is the HTTP status of the operation's usual success.
func (e Endpoint) Status() int {
	if len(e.Outcomes) == 0 {
		return http.StatusOK
	}
	return Status(e.Outcomes[0])
}

// PathParams are the names of the path's parameters, in order.
func (e Endpoint) PathParams() []string {
	var out []string
	for _, m := range pathParamRE.FindAllStringSubmatch(e.Path, -1) {
		out = append(out, m[1])
	}
	return out
}

// QueryParams are the operation's parameters REST takes from the query.
func (e Endpoint) QueryParams() []ops.Param {
	path := e.PathParams()
	var out []ops.Param
	for _, p := range e.Params {
		if !slices.Contains(path, p.Name) {
			out = append(out, p)
		}
	}
	return out
}

var pathParamRE = regexp.MustCompile(`\{([^}]+)\}`)

// Bind binds every operation to its route in Routes. It fails for an
// operation with none, or whose path names a parameter the operation does
// not have: every operation must be reachable over REST.
func Bind(table []ops.Operation) ([]Endpoint, error) {
	out := make([]Endpoint, 0, len(table))
	for _, op := range table {
		r, ok := Routes[op.ID]
		if !ok {
			return nil, fmt.Errorf("operation %s has no REST route", op.ID)
		}
		ep := Endpoint{Operation: op, Route: r}
		for _, name := range ep.PathParams() {
			if !slices.ContainsFunc(op.Params, func(p ops.Param) bool { return p.Name == name }) {
				return nil, fmt.Errorf("operation %s: route %s names {%s}, not one of its parameters", op.ID, r.Path, name)
			}
		}
		out = append(out, ep)
	}
	return out, nil
}
