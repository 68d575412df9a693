package llm

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// CompleteJSON asks for a JSON document conforming to req.ResponseSchema and
// runs check on it (check may be nil). Structured output is used where the
// endpoint supports it (see Config.StructuredOutput).
//
// The answer must be exactly one JSON value. Only this is tolerated around
// it: leading and trailing whitespace, one leading <think>…</think>
// reasoning block, and one ``` or ```json fence with prose around it (see
// extractJSON). An answer cut at the length limit is not asked for again
// (ErrTruncated): the same limit would cut it again. When parsing or
// check fails, the request is sent once more with the bad answer and a user
// message saying what was wrong; a second failure is an *Error of kind
// ErrMalformed. Endpoint failures are returned as Complete returns them.
func (c *Client) CompleteJSON(ctx context.Context, req Request, check func([]byte) error) ([]byte, error) {
	messages := append([]Message(nil), req.Messages...)
	var problem error
	for try := 0; try < 2; try++ {
		r := req
		r.Messages = messages
		resp, err := c.Complete(ctx, r)
		if err != nil {
			return nil, err
		}
		doc, err := extractJSON(resp.Message.Content)
		if err == nil && check != nil {
			if cerr := check(doc); cerr != nil {
				err = fmt.Errorf("the JSON document was rejected: %w", cerr)
			}
		}
		if err == nil {
			return doc, nil
		}
		problem = err
		bad := resp.Message.Content
		if strings.TrimSpace(bad) == "" {
			// An assistant message needs content when it has no tool
			// calls; the tool calls themselves are not replayed because
			// they have no tool answers.
			bad = "(no text)"
		}
		messages = append(messages,
			Message{Role: RoleAssistant, Content: bad},
			Message{Role: RoleUser, Content: "Your previous answer could not be used: " + err.Error() +
				". Answer again with only the corrected JSON document: no prose, no code fence."},
		)
	}
	return nil, &Error{Kind: ErrMalformed, Err: fmt.Errorf("failed to get a usable JSON answer in two tries: %w", problem)}
}

// extractJSON returns the single JSON value in a model's answer, after
// stripping surrounding whitespace and one leading <think>…</think> block.
// An answer that is not a JSON value by itself may hold it in one ``` or
// ```json code fence, anywhere, with prose around it: models put "Here is
// the plan:" before the fence whatever they are told. Anything else is an
// error that says what is wrong, fit to be shown to the model.
func extractJSON(answer string) ([]byte, error) {
	s := strings.TrimSpace(answer)
	if rest, ok := strings.CutPrefix(s, "<think>"); ok {
		_, after, closed := strings.Cut(rest, "</think>")
		if !closed {
			return nil, errors.New("the <think> block is not closed by </think>")
		}
		s = strings.TrimSpace(after)
	}
	doc, err := decodeOneValue(s)
	if err == nil {
		return doc, nil
	}
	open := fenceStart(s)
	if open < 0 {
		return nil, err
	}
	body, after, closed := strings.Cut(s[open+3:], "```")
	if !closed {
		return nil, errors.New("the ``` code fence is not closed")
	}
	if strings.Contains(after, "```") {
		return nil, errors.New("the answer has more than one code fence")
	}
	if len(body) >= 4 && strings.EqualFold(body[:4], "json") {
		body = body[4:]
	}
	return decodeOneValue(strings.TrimSpace(body))
}

// fenceStart is the index of the first ``` that starts a line of s, or -1.
func fenceStart(s string) int {
	for from := 0; ; {
		i := strings.Index(s[from:], "```")
		if i < 0 {
			return -1
		}
		i += from
		if i == 0 || s[i-1] == '\n' {
			return i
		}
		from = i + 3
	}
}

// decodeOneValue returns s when it is exactly one JSON value.
func decodeOneValue(s string) ([]byte, error) {
	if s == "" {
		return nil, errors.New("the answer contains no JSON document")
	}
	dec := json.NewDecoder(strings.NewReader(s))
	var v json.RawMessage
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("the answer is not valid JSON: %v", err)
	}
	if end := dec.InputOffset(); end != int64(len(s)) {
		return nil, fmt.Errorf("the answer has text after the JSON value, at byte %d", end)
	}
	return bytes.Clone(v), nil
}
