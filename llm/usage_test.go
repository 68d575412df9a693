package llm

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
)

func TestEstimateTokens(t *testing.T) {
	for _, tt := range []struct{ bytes, want int }{{0, 0}, {1, 1}, {4, 1}, {5, 2}, {512 << 10, 131072}} {
		if got := EstimateTokens(tt.bytes); got != tt.want {
			t.Errorf("EstimateTokens(%d) = %d, want %d", tt.bytes, got, tt.want)
		}
	}
}

// TestMeterSeesEveryBilledAnswer: the meter hears what the endpoint
// reports, an estimate from bytes where it reports nothing, and every
// answer of CompleteJSON's retry, the unusable one included.
func TestMeterSeesEveryBilledAnswer(t *testing.T) {
	answer := func(content, usage string) string {
		return fmt.Sprintf(`{"choices":[{"index":0,"message":{"role":"assistant","content":%q},"finish_reason":"stop"}]%s}`, content, usage)
	}
	prompt := strings.Repeat("p", 400) // 100 tokens by estimate
	tests := []struct {
		name   string
		bodies []string
		json   bool
		want   []Usage
	}{
		{"reported", []string{answer("hello", `,"usage":{"prompt_tokens":3,"completion_tokens":2}`)}, false,
			[]Usage{{PromptTokens: 3, CompletionTokens: 2}}},
		{"not reported", []string{answer("hello", "")}, false,
			[]Usage{{PromptTokens: 100, CompletionTokens: 2, Estimated: true}}},
		{"reported as zero", []string{answer("12345678", `,"usage":{"prompt_tokens":0,"completion_tokens":0}`)}, false,
			[]Usage{{PromptTokens: 100, CompletionTokens: 2, Estimated: true}}},
		{"json retry", []string{answer("not json", `,"usage":{"prompt_tokens":7,"completion_tokens":1}`), answer(`{"a":1}`, `,"usage":{"prompt_tokens":9,"completion_tokens":2}`)}, true,
			[]Usage{{PromptTokens: 7, CompletionTokens: 1}, {PromptTokens: 9, CompletionTokens: 2}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEndpoint(t, func(w http.ResponseWriter, _ *http.Request, call int64) {
				writeBody(w, http.StatusOK, tt.bodies[min(int(call), len(tt.bodies))-1])
			})
			c := newTestClient(t, Config{BaseURL: e.url, MaxRetries: -1})
			var mu sync.Mutex
			var got []Usage
			ctx := WithMeter(context.Background(), func(u Usage) {
				mu.Lock()
				got = append(got, u)
				mu.Unlock()
			})
			var err error
			if tt.json {
				_, err = c.CompleteJSON(ctx, userRequest(prompt), nil)
			} else {
				var resp Response
				resp, err = c.Complete(ctx, userRequest(prompt))
				if err == nil && resp.Usage != tt.want[0] {
					t.Errorf("Response.Usage = %+v, want %+v", resp.Usage, tt.want[0])
				}
			}
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Errorf("metered %+v, want %+v", got, tt.want)
			}
		})
	}
}
