package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"

	"github.com/secgpt/secgpt/llm"
)

// runDoctor checks every configured model endpoint and prints what works,
// one line each, with the fix for what does not. It fails when something
// does not work.
func runDoctor(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("doctor", stderr)
	configPath := fs.String("config", "", "config file")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	cfg, note, err := configFor(*configPath)
	if err != nil {
		return err
	}
	if note != "" {
		fmt.Fprintln(stderr, note)
	}
	models, err := startModels(cfg)
	if err != nil {
		return &startupError{err: err}
	}
	defer models.close()
	if !checkModels(ctx, cfg, models, stdout) {
		return errors.New("some model endpoint is not set up for secgpt (see above)")
	}
	return nil
}

// modelCheck is one model on one endpoint and the roles that use it.
type modelCheck struct {
	endpoint, model string
	roles           []string
}

// checkModels diagnoses each distinct model of cfg, at once, and prints
// each one's lines together, in the order of the roles. It reports
// whether everything works.
func checkModels(ctx context.Context, cfg Config, models *modelEndpoints, w io.Writer) bool {
	var checks []*modelCheck
	index := map[ModelRef]*modelCheck{}
	for _, r := range modelRoles(cfg) {
		c, ok := index[r.ref]
		if !ok {
			c = &modelCheck{endpoint: r.ref.Endpoint, model: r.ref.Model}
			index[r.ref] = c
			checks = append(checks, c)
		}
		c.roles = append(c.roles, r.role)
	}
	reports := make([][]llm.Finding, len(checks))
	var wg sync.WaitGroup
	for i, c := range checks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			reports[i] = llm.Diagnose(ctx, models.clients[c.endpoint], c.model)
		}()
	}
	wg.Wait()
	ok := true
	for i, c := range checks {
		fmt.Fprintf(w, "%s: %s at %s\n", strings.Join(c.roles, ", "), c.model, models.urls[c.endpoint])
		for _, f := range reports[i] {
			mark := "✓"
			if !f.OK {
				mark, ok = "✗", false
			}
			fmt.Fprintf(w, "  %s %s: %s\n", mark, f.Check, f.Say)
		}
	}
	return ok
}
