package llm

import "context"

// BytesPerToken is how many bytes of text one token is taken to be where
// an endpoint reports no usage: EstimateTokens divides by it, rounding up.
// Four bytes is about what an English BPE vocabulary averages on prose;
// JSON, code and other languages cost more tokens per byte, so the
// estimate is low for them, which the budgets' headroom absorbs.
const BytesPerToken = 4

// EstimateTokens is the tokens n bytes of text are taken to cost: n/4,
// rounded up.
func EstimateTokens(n int) int { return (n + BytesPerToken - 1) / BytesPerToken }

// Meter is told what each completion the endpoint answered cost: every
// attempt that got an answer, the retries of CompleteJSON and of an
// adapted request included, whether or not the answer could be used.
type Meter func(Usage)

type meterKey struct{}

// WithMeter returns ctx carrying m: the client reports to m what each
// completion made under ctx cost.
func WithMeter(ctx context.Context, m Meter) context.Context {
	return context.WithValue(ctx, meterKey{}, m)
}

// meter reports u to ctx's meter, if any.
func meter(ctx context.Context, u Usage) {
	if m, ok := ctx.Value(meterKey{}).(Meter); ok && m != nil {
		m(u)
	}
}

// billed is what an answer cost: the endpoint's own count where it gave
// one, else an estimate from the prompt's bytes and the answer's
// (content, reasoning and tool calls), marked Estimated.
func billed(w wireResponse, promptBytes int) Usage {
	if w.Usage != nil && (w.Usage.PromptTokens > 0 || w.Usage.CompletionTokens > 0) {
		u := *w.Usage
		u.Estimated = false
		return u
	}
	n := 0
	for _, c := range w.Choices {
		if a := c.Message; a != nil {
			n += len(a.Content) + len(a.Refusal) + len(a.Reasoning) + len(a.ReasoningContent)
			for _, tc := range a.ToolCalls {
				n += len(tc.Function.Name) + len(tc.Function.Arguments)
			}
		}
	}
	return Usage{PromptTokens: EstimateTokens(promptBytes), CompletionTokens: EstimateTokens(n), Estimated: true}
}
