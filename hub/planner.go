package hub

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/secgpt/secgpt/apps"
	"github.com/secgpt/secgpt/llm"
	"github.com/secgpt/secgpt/store"
)

// plannerInstructions are the planner's system text: the hub's own words
// and, for %s, the catalogue of app and function names. The planner reads
// no text a vendor wrote but identifiers (see signature).
const plannerInstructions = `You are the planner of a personal assistant. Turn the user's latest request into a plan: a JSON object {"steps": [...]}, where each step calls one function of one app:
  {"id": "s1", "app": "<app>", "function": "<function>", "args": {...}, "depends_on": ["<earlier step id>"], "inputs_from": {"<argument>": "<step id>.<result field>"}}
Rules:
- Use only the apps and functions listed below, and only when the request needs them.
- When the request needs no app, answer it yourself, clearly and briefly, as a helpful assistant: {"steps": [], "answer": "<your answer to the user>"}. When you plan steps, write no "answer": the apps answer.
- When the user names apps, plan exactly those apps.
- Put in "args" only values the user gave in the latest request. Leave out anything you would have to guess or take from elsewhere: each app completes its own arguments.
- When a step needs another step's result, name it in "inputs_from" instead of copying the value. Steps that do not need each other's results must not depend on each other.
- An annotation app answers the user by itself: plan it alone, with its function "respond" and empty args.
- Answer with the JSON object only. The arguments each function takes are in the response format.

Apps and their functions:
%s`

// plan asks the planner model for a plan and parses it strictly. The model
// sees the hub's instructions, the user's request, the conversation as the
// no-app assistant sees it (the user's messages and the answers no app
// shaped; see assistantHistory), and the catalogue of the apps the request
// named (all apps when it named none) as identifiers and signatures: no
// text an app wrote, nor text written from an app's output. That is what
// lets it answer a request that needs no app itself, in the same round
// (Plan.Answer), as the assistant without isolation does: its answer is as
// free of apps' text as the no-app spoke's would be.
//
// The plan comes back with the steps that were dropped as invalid (see
// parsePlan); only a plan that cannot be read, or has too many steps, is
// asked for again, once, and then an error.
func (h *Hub) plan(ctx context.Context, q *query, history []store.MemoryEntry, named map[string]bool) (Plan, []DroppedStep, error) {
	if app, ok := h.catalog.soleAnnotation(named); ok {
		// The request names one annotation app and no other app: the rules
		// above leave one plan, the app alone answering, so no model
		// round is spent on it.
		return Plan{Steps: []PlanStep{{ID: "s1", App: app, Function: apps.AnnotationFunction, Args: json.RawMessage("{}")}}}, nil, nil
	}
	cat, err := h.catalog.planCatalogue(named)
	if err != nil {
		return Plan{}, nil, err
	}
	msgs := []llm.Message{{Role: llm.RoleSystem, Content: fmt.Sprintf(plannerInstructions, cat.text)}}
	msgs = append(msgs, assistantHistory(history)...)
	msgs = append(msgs, llm.Message{Role: llm.RoleUser, Content: q.text})
	req := llm.Request{
		Model:          h.opts.Models.Planner,
		Messages:       msgs,
		ResponseSchema: &llm.JSONSchema{Name: planSchemaName, Schema: cat.schema},
	}
	var plan Plan
	var dropped []DroppedStep
	var lastErr error // the last reason a plan was refused
	err = h.complete(ctx, q, "", req, func(ctx context.Context) error {
		_, err := h.llm.CompleteJSON(ctx, req, func(b []byte) error {
			if !q.spendLLMCall(h.opts.MaxLLMCallsPerQuery) {
				return fmt.Errorf("model call budget exhausted")
			}
			p, d, err := parsePlan(b, h.catalog, h.opts.MaxPlanSteps)
			lastErr = err
			if err == nil {
				plan, dropped = p, d
			}
			return err
		})
		return err
	})
	if err != nil {
		if lastErr != nil {
			return Plan{}, nil, lastErr
		}
		return Plan{}, nil, err
	}
	return plan, dropped, nil
}
