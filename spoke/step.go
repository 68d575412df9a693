package spoke

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/secgpt/secgpt/apps"
	"github.com/secgpt/secgpt/llm"
)

func jsonMarshal(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("failed to encode frame body: %w", err)
	}
	return b, nil
}

// Bounds on what a spoke keeps in its own memory per step.
const (
	maxMemoryEntry = 2000
	maxToolContent = 64 << 10
)

func (rt *runtime) runStep(ctx context.Context, step Step) Result {
	switch {
	case rt.app == nil:
		return rt.runVanilla(ctx, step)
	case rt.app.Spec().IsAnnotation():
		return rt.runAnnotation(ctx, step)
	default:
		return rt.runApp(ctx, step)
	}
}

// complete asks the hub for one completion.
func (rt *runtime) complete(msgs []llm.Message, tools []llm.Tool) (LLMReply, error) {
	var reply LLMReply
	if err := rt.request(KindLLM, LLMRequest{Messages: msgs, Tools: tools}, &reply); err != nil {
		return LLMReply{}, err
	}
	return reply, nil
}

func modelFailure(err error) Result {
	var hubErr *errHub
	if errors.As(err, &hubErr) {
		return Result{Error: hubErr.msg}
	}
	return Result{Error: "the model could not be reached: " + err.Error()}
}

// runVanilla answers without any app: either from the user's query and
// history alone, or, as the combiner, from several apps' typed fields,
// which it sees as completed tool calls.
func (rt *runtime) runVanilla(_ context.Context, step Step) Result {
	var msgs []llm.Message
	if len(step.Results) > 0 {
		msgs = append(msgs, llm.Message{Role: llm.RoleSystem, Content: combinerPrompt})
		msgs = append(msgs, llm.Message{Role: llm.RoleUser, Content: step.Query})
		call := llm.Message{Role: llm.RoleAssistant}
		for i, r := range step.Results {
			call.ToolCalls = append(call.ToolCalls, llm.ToolCall{ID: fmt.Sprintf("result_%d", i+1), Name: r.Tool, Arguments: string(r.Args)})
		}
		msgs = append(msgs, call)
		for i, r := range step.Results {
			msgs = append(msgs, llm.Message{Role: llm.RoleTool, ToolCallID: fmt.Sprintf("result_%d", i+1), Content: string(r.Result)})
		}
	} else {
		msgs = append(msgs, llm.Message{Role: llm.RoleSystem, Content: vanillaPrompt})
		msgs = append(msgs, step.History...)
		msgs = append(msgs, llm.Message{Role: llm.RoleUser, Content: step.Query})
	}
	reply, err := rt.complete(msgs, nil)
	if err != nil {
		return modelFailure(err)
	}
	if strings.TrimSpace(reply.Message.Content) == "" {
		return Result{Error: "the model returned an empty answer"}
	}
	return Result{Answer: reply.Message.Content}
}

// runAnnotation answers the query under the app's annotation text, which
// reaches no context but this spoke's.
func (rt *runtime) runAnnotation(_ context.Context, step Step) Result {
	spec := rt.app.Spec()
	msgs := []llm.Message{{Role: llm.RoleSystem, Content: annotationPrompt(spec)}}
	msgs = appendMemory(msgs, step.Memory)
	msgs = append(msgs, llm.Message{Role: llm.RoleUser, Content: step.Query})
	reply, err := rt.complete(msgs, nil)
	if err != nil {
		return modelFailure(err)
	}
	answer := reply.Message.Content
	if strings.TrimSpace(answer) == "" {
		return Result{Error: "the model returned an empty answer"}
	}
	rt.remember(fmt.Sprintf("Asked: %s\nAnswered: %s", step.Query, answer))
	res := Result{Answer: answer}
	if out, err := json.Marshal(map[string]string{"answer": answer}); err == nil {
		if fn, ok := spec.Function(apps.AnnotationFunction); ok && apps.ValidateDocument(fn.Response, out) == nil {
			res.Output = out
		}
	}
	return res
}

// appStep is the state of one step on an app spoke.
type appStep struct {
	rt     *runtime
	spec   apps.Spec
	env    *childEnv
	step   Step
	output json.RawMessage
	// reported is set once the output went to the hub ahead of the answer.
	reported bool
	calls    []CallLog
	probed   map[string]ProbeReply
	// checked are the plan's arguments for the step's function once they
	// have been checked against its request schema: a call with exactly
	// these is not checked again.
	checked json.RawMessage
}

// runApp runs the planned function and, when the plan's arguments already
// satisfy its schema, does so without a model call. The model then runs
// only to answer the user, and every tool call it returns has already been
// checked by the hub against this query's capability set.
func (rt *runtime) runApp(ctx context.Context, step Step) Result {
	spec := rt.app.Spec()
	s := &appStep{rt: rt, spec: spec, env: newChildEnv(rt), step: step, probed: map[string]ProbeReply{}}
	fn, ok := spec.Function(step.Function)
	if !ok {
		return Result{Error: fmt.Sprintf("%s has no function %q", spec.Name, step.Function)}
	}
	tool := apps.ToolName(spec.Name, fn.Name)
	args := step.Args
	if len(args) == 0 {
		args = json.RawMessage("{}")
	}
	ready := step.ArgsComplete || apps.ValidateDocument(fn.Request, args) == nil
	if ready {
		s.checked = args
	}

	msgs := []llm.Message{{Role: llm.RoleSystem, Content: appPrompt(spec, step.OtherTools)}}
	msgs = appendMemory(msgs, step.Memory)
	msgs = append(msgs, llm.Message{Role: llm.RoleUser, Content: taskText(step, tool, args, ready)})

	if ready {
		content := s.exec(ctx, llm.ToolCall{ID: "call_step", Name: tool, Arguments: string(args)})
		msgs = append(msgs,
			llm.Message{Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{{ID: "call_step", Name: tool, Arguments: string(args)}}},
			llm.Message{Role: llm.RoleTool, ToolCallID: "call_step", Content: content})
		if !step.Answer {
			return s.finish("")
		}
	}

	tools := s.tools()
	for i := 0; i < step.MaxLLMCalls; i++ {
		s.report()
		reply, err := rt.complete(msgs, tools)
		if err != nil {
			res := modelFailure(err)
			res.Output, res.Calls = s.output, s.calls
			return res
		}
		m := reply.Message
		turn := llm.Message{Role: llm.RoleAssistant, Content: m.Content, ToolCalls: uniqueIDs(m.ToolCalls, len(msgs))}
		for _, r := range reply.Refused {
			turn.ToolCalls = append(turn.ToolCalls, llm.ToolCall{ID: r.ID, Name: r.Name, Arguments: "{}"})
		}
		msgs = append(msgs, turn)
		if len(turn.ToolCalls) == 0 {
			return s.finish(m.Content)
		}
		for _, tc := range turn.ToolCalls[:len(turn.ToolCalls)-len(reply.Refused)] {
			msgs = append(msgs, llm.Message{Role: llm.RoleTool, ToolCallID: tc.ID, Content: s.exec(ctx, tc)})
		}
		for _, r := range reply.Refused {
			s.calls = append(s.calls, CallLog{Tool: r.Name, Error: "refused by the hub: " + r.Reason})
			msgs = append(msgs, llm.Message{Role: llm.RoleTool, ToolCallID: r.ID, Content: "Refused by the hub: " + r.Reason})
		}
	}
	res := s.finish("")
	if res.Error == "" && step.Answer {
		res.Error = fmt.Sprintf("%s's model did not finish within its budget of %d calls", spec.Name, step.MaxLLMCalls)
	}
	return res
}

// finish ends the step, recording what the spoke did in its own memory.
func (s *appStep) finish(answer string) Result {
	var note strings.Builder
	for _, c := range s.calls {
		fmt.Fprintf(&note, "%s(%s) -> ", c.Tool, c.Args)
		if c.Error != "" {
			note.WriteString("error: " + c.Error)
		} else {
			note.Write(c.Result)
		}
		note.WriteString("\n")
	}
	if answer != "" {
		note.WriteString("Answered: " + answer)
	}
	s.rt.remember(note.String())
	res := Result{Output: s.output, Calls: s.calls}
	if s.step.Answer {
		res.Answer = answer
		return res
	}
	if s.output == nil {
		res.Error = fmt.Sprintf("%s did not produce a result for %s", s.spec.Name, s.step.Function)
	}
	return res
}

// report sends the planned function's result to the hub as soon as it is
// known, once, when this step writes an answer: with the model request
// that follows at once, so that the hub may use it while the model writes.
func (s *appStep) report() {
	if s.reported || s.output == nil || !s.step.Answer {
		return
	}
	s.reported = true
	if err := s.rt.notify(KindOutput, Output{Output: s.output}); err != nil {
		s.rt.log.Debug().Err(err).Msg("Failed to report the output early")
	}
}

// tools are the app's functions the plan names, with their schemas, and
// the other apps' functions the plan lets it call, by name only: the hub
// decides whether any call may run.
func (s *appStep) tools() []llm.Tool {
	own := s.step.Functions
	if len(own) == 0 {
		own = []string{s.step.Function}
	}
	var tools []llm.Tool
	for _, f := range s.spec.Functions {
		if slices.Contains(own, f.Name) {
			tools = append(tools, llm.Tool{Name: apps.ToolName(s.spec.Name, f.Name), Description: f.Description, Parameters: f.Request})
		}
	}
	for _, name := range s.step.OtherTools {
		tools = append(tools, llm.Tool{Name: name, Description: "A function of another app. Only its name is known here; the hub decides whether you may use it.", Parameters: json.RawMessage(`{"type":"object"}`)})
	}
	return tools
}

// exec runs one approved tool call and returns the text for the model.
func (s *appStep) exec(ctx context.Context, tc llm.ToolCall) string {
	log := CallLog{Tool: tc.Name, Args: json.RawMessage(tc.Arguments)}
	result, err := s.call(ctx, tc)
	if !json.Valid(log.Args) {
		log.Args = nil
	}
	if err != nil {
		log.Error = err.Error()
		s.calls = append(s.calls, log)
		return "Error: " + err.Error()
	}
	log.Result = result
	s.calls = append(s.calls, log)
	return truncate(string(result), maxToolContent)
}

func (s *appStep) call(ctx context.Context, tc llm.ToolCall) (json.RawMessage, error) {
	appName, fnName, ok := apps.SplitToolName(tc.Name)
	if !ok {
		return nil, fmt.Errorf("unknown tool %q", tc.Name)
	}
	args := json.RawMessage(tc.Arguments)
	if strings.TrimSpace(tc.Arguments) == "" {
		args = json.RawMessage("{}")
	}
	if !json.Valid(args) {
		return nil, errors.New("the arguments are not valid JSON")
	}
	if appName != s.spec.Name {
		return s.callOther(tc.Name, args)
	}
	fn, ok := s.spec.Function(fnName)
	if !ok {
		return nil, fmt.Errorf("%s has no function %q", s.spec.Name, fnName)
	}
	if fn.Name != s.step.Function || !bytes.Equal(args, s.checked) {
		if err := apps.ValidateDocument(fn.Request, args); err != nil {
			return nil, fmt.Errorf("the arguments do not match %s's schema: %v", tc.Name, err)
		}
	}
	res, err := s.rt.callOwn(ctx, s.env, fn, args)
	if err == nil && fn.Name == s.step.Function {
		s.output = res
	}
	return res, err
}

// callOther asks the hub to run another app's function.
func (s *appStep) callOther(tool string, args json.RawMessage) (json.RawMessage, error) {
	pr, ok := s.probed[tool]
	if !ok {
		if err := s.rt.request(KindProbe, Probe{Tool: tool}, &pr); err != nil {
			return nil, fmt.Errorf("the hub refused %s: %w", tool, err)
		}
		s.probed[tool] = pr
	}
	if err := apps.ValidateDocument(pr.Request, args); err != nil {
		return nil, fmt.Errorf("the arguments do not match %s's schema %s: %v", tool, pr.Request, err)
	}
	var reply AppCallReply
	if err := s.rt.request(KindAppCall, AppCall{Tool: tool, Args: args}, &reply); err != nil {
		return nil, fmt.Errorf("the hub refused %s: %w", tool, err)
	}
	if err := apps.ValidateDocument(pr.Response, reply.Result); err != nil {
		return nil, fmt.Errorf("%s's result does not match its schema", tool)
	}
	return reply.Result, nil
}

// callOwn runs one of the hosted app's functions. A panicking app is a
// failed call, not a dead spoke.
func (rt *runtime) callOwn(ctx context.Context, env apps.Env, fn apps.Function, args json.RawMessage) (res json.RawMessage, err error) {
	defer func() {
		if r := recover(); r != nil {
			rt.log.Error().Interface("panic", r).Str("function", fn.Name).Msg("App panicked")
			res, err = nil, fmt.Errorf("the app crashed while running %s", fn.Name)
		}
	}()
	out, err := rt.app.Call(ctx, env, fn.Name, args)
	if err != nil {
		return nil, err
	}
	if err := apps.ValidateDocument(fn.Response, out); err != nil {
		return nil, fmt.Errorf("the app's result does not match its declared format: %v", err)
	}
	return out, nil
}

// remember appends to the spoke's own memory; the hub answers nothing
// (see KindMemory), and a failure to send is only logged: the result
// that follows, and carries it, fails the same way.
func (rt *runtime) remember(note string) {
	note = strings.TrimSpace(note)
	if note == "" {
		return
	}
	if err := rt.notify(KindMemory, MemoryAppend{Content: truncate(note, maxMemoryEntry)}); err != nil {
		rt.log.Debug().Err(err).Msg("Failed to send a memory entry")
	}
}

// uniqueIDs gives every tool call a distinct, non-empty ID, so each gets
// exactly one tool message in the transcript.
func uniqueIDs(calls []llm.ToolCall, salt int) []llm.ToolCall {
	seen := map[string]bool{}
	out := make([]llm.ToolCall, len(calls))
	for i, c := range calls {
		if c.ID == "" || seen[c.ID] {
			c.ID = fmt.Sprintf("call_%d_%d", salt, i)
		}
		seen[c.ID] = true
		out[i] = c
	}
	return out
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
