package main

import (
	"fmt"
	"sort"

	"github.com/secgpt/secgpt/llm"
	"github.com/secgpt/secgpt/llm/simulator"
)

// modelEndpoints are the configuration's model endpoints: a client for the
// default endpoint and one for each of llm.endpoints, behind the router the
// hub uses; or the simulated model, started on loopback, for them all.
type modelEndpoints struct {
	router  *llm.Router
	clients map[string]*llm.Client // by endpoint name; "" is the default
	urls    map[string]string
	sim     *simulator.Server
}

// startModels builds the clients of cfg's endpoints, starting the
// simulated model when the provider is the simulator. It contacts no
// endpoint.
func startModels(cfg Config) (*modelEndpoints, error) {
	m := &modelEndpoints{clients: map[string]*llm.Client{}, urls: map[string]string{}}
	endpoints := map[string]EndpointConfig{"": cfg.LLM.EndpointConfig}
	for name, e := range cfg.LLM.Endpoints {
		if e.Timeout == 0 {
			e.Timeout = cfg.LLM.Timeout
		}
		if e.StructuredOutput == "" {
			e.StructuredOutput = cfg.LLM.StructuredOutput
		}
		endpoints[name] = e
	}
	if cfg.LLM.Provider == "simulator" {
		opts := simulator.Options{Latency: cfg.LLM.Simulator.Latency, Model: "simulator"}
		if p, ok := simulator.LookupProfile(cfg.LLM.Simulator.Profile); ok {
			opts.Profile = &p
		}
		m.sim = simulator.New(simulator.Obedient(), opts)
		url, err := m.sim.Start("127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("failed to start the simulated model: %w", err)
		}
		for name, e := range endpoints {
			e.BaseURL, e.APIKeyEnv = url, ""
			endpoints[name] = e
		}
	}
	for name, e := range endpoints {
		c, err := llm.NewClient(llm.Config{
			BaseURL: e.BaseURL, APIKey: e.apiKey(), Timeout: e.Timeout, StructuredOutput: e.StructuredOutput,
		})
		if err != nil {
			m.close()
			return nil, fmt.Errorf("failed to set up the model endpoint %s: %w", endpointLabel(name), err)
		}
		m.clients[name], m.urls[name] = c, e.BaseURL
	}
	m.router = llm.NewRouter(m.clients[""])
	for _, r := range modelRoles(cfg) {
		if r.ref.Endpoint != "" {
			m.router.Route(r.ref.key(), llm.Route{Client: m.clients[r.ref.Endpoint], Model: r.ref.Model})
		}
	}
	return m, nil
}

func (m *modelEndpoints) close() {
	if m.sim != nil {
		_ = m.sim.Close()
	}
}

func endpointLabel(name string) string {
	if name == "" {
		return "llm.base_url"
	}
	return "llm.endpoints." + name
}

// roleModel is the model a role uses.
type roleModel struct {
	role string
	ref  ModelRef
}

// modelRoles lists every role's model: the planner, the spokes, the
// vanilla spokes, then each app with a model of its own.
func modelRoles(cfg Config) []roleModel {
	roles := []roleModel{{"planner", cfg.LLM.Models.Planner}, {"spoke", cfg.LLM.Models.Spoke}, {"vanilla", cfg.LLM.Models.Vanilla}}
	apps := make([]string, 0, len(cfg.LLM.Models.Apps))
	for app := range cfg.LLM.Models.Apps {
		apps = append(apps, app)
	}
	sort.Strings(apps)
	for _, app := range apps {
		roles = append(roles, roleModel{"app " + app, cfg.LLM.Models.Apps[app]})
	}
	return roles
}
