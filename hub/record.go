package hub

import (
	"encoding/json"

	"github.com/secgpt/secgpt/spoke"
)

// Record is the machine-readable account of one query.
type Record struct {
	QueryID string `json:"query_id"`
	User    string `json:"user"`
	Query   string `json:"query"`
	Plan    *Plan  `json:"plan,omitempty"`
	// Dropped are the planner's steps that did not run, with why: invalid,
	// or for apps the query did not name.
	Dropped  []DroppedStep   `json:"dropped,omitempty"`
	Consents []ConsentRecord `json:"consents"`
	Calls    []CallRecord    `json:"calls"`
	Spokes   []SpokeRecord   `json:"spokes"`
	// Answer, Parts, Summary and Notes are the reply (see Reply).
	Answer   string   `json:"answer,omitempty"`
	Parts    []Part   `json:"parts,omitempty"`
	Summary  *Summary `json:"summary,omitempty"`
	Notes    []Note   `json:"notes,omitempty"`
	Error    string   `json:"error,omitempty"`
	LLMCalls int      `json:"llm_calls"`
	// Tokens is what the query's model calls were billed (or estimated).
	Tokens     int64 `json:"tokens"`
	DurationMS int64 `json:"duration_ms"`
}

// ConsentRecord is one consent decision of the query.
type ConsentRecord struct {
	Category Category        `json:"category"`
	Subject  string          `json:"subject"`
	App      string          `json:"app"`
	Caller   string          `json:"caller,omitempty"`
	Function string          `json:"function,omitempty"`
	Args     json.RawMessage `json:"args,omitempty"`
	Calls    []PlannedCall   `json:"calls,omitempty"`
	Data     []DataItem      `json:"data,omitempty"`
	Result   json.RawMessage `json:"result,omitempty"`
	InPlan   bool            `json:"in_plan"`
	Decision Decision        `json:"decision"`
	Source   string          `json:"source"`
}

// CallRecord is one app function call. Source is "hub" for calls the hub
// ran or relayed itself and "spoke" for calls a spoke reports having made
// inside its own process.
type CallRecord struct {
	Step     string          `json:"step,omitempty"`
	App      string          `json:"app"`
	Function string          `json:"function"`
	Caller   string          `json:"caller,omitempty"`
	Args     json.RawMessage `json:"args,omitempty"`
	Result   json.RawMessage `json:"result,omitempty"`
	Error    string          `json:"error,omitempty"`
	SpokePID int             `json:"spoke_pid,omitempty"`
	Source   string          `json:"source"`
}

// SpokeRecord is one spoke process that served the query.
type SpokeRecord struct {
	App  string `json:"app"`
	PID  int    `json:"pid"`
	Cold bool   `json:"cold"`
}

func (q *query) recordConsent(req ConsentRequest, subj string, d Decision, source string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.record.Consents = append(q.record.Consents, ConsentRecord{
		Category: req.Category, Subject: subj, App: req.App, Caller: req.Caller, Function: req.Function,
		Args: req.Args, Calls: req.Calls, Data: req.Data, Result: req.Result, InPlan: req.InPlan, Decision: d, Source: source,
	})
}

func (q *query) recordCall(c CallRecord) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.record.Calls = append(q.record.Calls, c)
}

func (q *query) recordSpoke(app string, info spoke.Info) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, s := range q.record.Spokes {
		if s.App == app && s.PID == info.PID {
			return
		}
	}
	q.record.Spokes = append(q.record.Spokes, SpokeRecord{App: app, PID: info.PID, Cold: info.Cold})
}

// recordRefusal records a refusal the broker made without asking.
func (q *query) recordRefusal(c ConsentRecord) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.record.Consents = append(q.record.Consents, c)
}
