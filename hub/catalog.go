package hub

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"

	"github.com/secgpt/secgpt/apps"
)

// catalog holds the installed apps' specs and what the hub derives from them.
type catalog struct {
	specs  map[string]apps.Spec
	names  []string // installed order
	hashes map[string]string

	mu          sync.Mutex
	relaxedMemo map[string]json.RawMessage
	catalogues  map[string]planCatalogue
}

func newCatalog(specs []apps.Spec) (*catalog, error) {
	c := &catalog{specs: map[string]apps.Spec{}, hashes: map[string]string{}, relaxedMemo: map[string]json.RawMessage{}, catalogues: map[string]planCatalogue{}}
	for _, s := range specs {
		if err := s.Validate(); err != nil {
			return nil, fmt.Errorf("failed to install app: %w", err)
		}
		if _, dup := c.specs[s.Name]; dup {
			return nil, fmt.Errorf("failed to install app: %q installed twice", s.Name)
		}
		for _, f := range s.Functions {
			for _, schema := range []json.RawMessage{f.Request, f.Response} {
				if err := apps.CheckSchema(schema); err != nil {
					return nil, fmt.Errorf("failed to install app %s: function %s: %w", s.Name, f.Name, err)
				}
			}
		}
		c.specs[s.Name] = s
		c.names = append(c.names, s.Name)
		c.hashes[s.Name] = s.Hash()
	}
	if _, err := c.planCatalogue(nil); err != nil {
		return nil, err
	}
	return c, nil
}

func (c *catalog) spec(name string) (apps.Spec, bool) {
	s, ok := c.specs[name]
	return s, ok
}

// irreversible reports whether app's function fn cannot be undone.
func (c *catalog) irreversible(app, fn string) bool {
	f, _ := c.specs[app].Function(fn)
	return f.Irreversible
}

// relaxed returns fn's request schema without "required" (nor
// "dependentRequired") at any depth, for checking a plan's arguments,
// which may be incomplete: the spoke completes them. Only keywords go:
// a property named "required" stays.
func (c *catalog) relaxed(app string, fn apps.Function) json.RawMessage {
	key := app + "." + fn.Name
	c.mu.Lock()
	defer c.mu.Unlock()
	if s, ok := c.relaxedMemo[key]; ok {
		return s
	}
	out := fn.Request
	if v, err := decodeOrdered(fn.Request); err == nil {
		if b, err := json.Marshal(withoutRequired.apply(v)); err == nil {
			out = b
		}
	}
	c.relaxedMemo[key] = out
	return out
}

// planSchemaName names the structured output the planner must produce.
const planSchemaName = "secgpt_plan"

// maxPlanCatalogues bounds the planner catalogues kept, one per set of
// named apps.
const maxPlanCatalogues = 256

// planCatalogue is what the planner is shown of the installed apps for
// one set of named apps: their names and functions as text, and each
// function's signature in the plan's response schema. It holds no text a
// vendor wrote but identifiers.
type planCatalogue struct {
	text   string
	schema json.RawMessage
}

// planCatalogue returns the catalogue for a query that named the apps in
// named: only those apps, or every installed app when it named none.
func (c *catalog) planCatalogue(named map[string]bool) (planCatalogue, error) {
	var list []string
	for _, name := range c.names {
		if len(named) == 0 || named[name] {
			list = append(list, name)
		}
	}
	key := strings.Join(list, ",")
	c.mu.Lock()
	pc, ok := c.catalogues[key]
	c.mu.Unlock()
	if ok {
		return pc, nil
	}
	schema, err := c.buildPlanSchema(list)
	if err != nil {
		return planCatalogue{}, err
	}
	var b strings.Builder
	for _, name := range list {
		s := c.specs[name]
		fmt.Fprintf(&b, "- %s", name)
		if s.IsAnnotation() {
			b.WriteString(" (an annotation app: it answers by itself)")
		}
		b.WriteString(":")
		for _, f := range s.Functions {
			fmt.Fprintf(&b, " %s", f.Name)
		}
		b.WriteString("\n")
	}
	pc = planCatalogue{text: b.String(), schema: schema}
	c.mu.Lock()
	if len(c.catalogues) < maxPlanCatalogues {
		c.catalogues[key] = pc
	}
	c.mu.Unlock()
	return pc, nil
}

// maxAppSignatures bounds the signatures of one app's functions in the
// planner's catalogue, which a request naming no app pays in full: no app
// can make every request's plan cost more by declaring many large
// functions. Past it, a function is planned as an open object, which its
// spoke completes. The built-in apps need at most 0.6 KiB.
const maxAppSignatures = 4 << 10
