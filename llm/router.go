package llm

import "context"

// Router sends each request to the endpoint its model is routed to, so
// that each role (the planner, the spokes, one app) can have a model on an
// endpoint of its own: a small local model as planner, a larger one for
// the spokes. It is safe for concurrent use once built.
type Router struct {
	fallback *Client
	routes   map[string]Route
}

// Route is where requests for one model name go: the client of its
// endpoint, and the model's name there.
type Route struct {
	Client *Client
	Model  string
}

// NewRouter returns a router that sends requests for a model it has no
// route for to fallback, unchanged.
func NewRouter(fallback *Client) *Router {
	return &Router{fallback: fallback, routes: map[string]Route{}}
}

// Route sends requests for the model name to r's client, as r's model.
func (r *Router) Route(name string, to Route) { r.routes[name] = to }

func (r *Router) route(req Request) (*Client, Request) {
	if to, ok := r.routes[req.Model]; ok {
		req.Model = to.Model
		return to.Client, req
	}
	return r.fallback, req
}

// Complete is Client.Complete on the request's endpoint.
func (r *Router) Complete(ctx context.Context, req Request) (Response, error) {
	c, req := r.route(req)
	return c.Complete(ctx, req)
}

// CompleteJSON is Client.CompleteJSON on the request's endpoint.
func (r *Router) CompleteJSON(ctx context.Context, req Request, check func([]byte) error) ([]byte, error) {
	c, req := r.route(req)
	return c.CompleteJSON(ctx, req, check)
}
