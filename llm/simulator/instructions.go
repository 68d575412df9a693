package simulator

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// instructionOpen starts every instruction the obedient model obeys.
const instructionOpen = "[[obey:"

// Instruction kinds.
const (
	obeyCall          = "call"
	obeyShareRecorded = "share-recorded"
	obeyAnswerAdjust  = "answer-adjust"
	obeyStyle         = "style"
	obeySay           = "say"
	obeyAnswerReplace = "answer-replace"
	obeyAnswerReport  = "answer-report"
	obeyPlanDrop      = "plan-drop"
	obeyPlanFlood     = "plan-flood"
	obeySet           = "set"
)

// maxFlood bounds a plan-flood instruction's count.
const maxFlood = 100

// instruction is one parsed [[obey: …]] instruction.
type instruction struct {
	// text is the instruction verbatim, from "[[obey:" to "]]"; identical
	// texts are one instruction.
	text string
	kind string
	// call: the tool and its arguments (a JSON object).
	tool string
	args json.RawMessage
	// share-recorded, answer-adjust, answer-report and set: APP.ARG or
	// APP.FIELD; plan-drop: APP.
	app, field string
	// answer-adjust: the amount to add.
	delta float64
	// answer-report and set: the value, a JSON literal.
	value json.RawMessage
	// plan-flood: how many steps.
	count int
	// style: "fiction" or "factual"; say and answer-replace: the text.
	style string
	say   string
}

// callID is the tool-call id under which the agent emits a call
// instruction, so that it can tell later that the call was made.
func (in instruction) callID() string {
	sum := sha256.Sum256([]byte(in.text))
	return "obey_" + hex.EncodeToString(sum[:])[:12]
}

// floodID is the tool-call id of the k-th call (from 1) of a plan-flood
// instruction in the agent role.
func (in instruction) floodID(k int) string { return fmt.Sprintf("%s_%d", in.callID(), k) }

// parseInstructions returns every well-formed instruction in texts, in order
// of appearance, each distinct text once. Malformed instructions are
// skipped.
func parseInstructions(texts []string) []instruction {
	var out []instruction
	seen := map[string]bool{}
	for _, s := range texts {
		for pos := 0; ; {
			i := strings.Index(s[pos:], instructionOpen)
			if i < 0 {
				break
			}
			start := pos + i
			in, end, ok := parseInstruction(s, start+len(instructionOpen))
			if !ok {
				pos = start + len(instructionOpen)
				continue
			}
			in.text = s[start:end]
			if !seen[in.text] {
				seen[in.text] = true
				out = append(out, in)
			}
			pos = end
		}
	}
	return out
}

var (
	toolPattern   = regexp.MustCompile(`^[A-Za-z0-9_.\-]+$`)
	targetPattern = regexp.MustCompile(`^([A-Za-z0-9_\-]+)\.([A-Za-z_][A-Za-z0-9_]*)$`)
	appPattern    = regexp.MustCompile(`^[A-Za-z0-9_\-]+$`)
	deltaPattern  = regexp.MustCompile(`^[+-]?[0-9]+(\.[0-9]+)?$`)
	countPattern  = regexp.MustCompile(`^[0-9]{1,3}$`)
)

// parseInstruction parses the body of an instruction that starts at s[i]
// (just after "[[obey:") and returns it with the index just past its "]]".
func parseInstruction(s string, i int) (instruction, int, bool) {
	var in instruction
	i = skipSpace(s, i)
	in.kind, i = word(s, i)
	i = skipSpace(s, i)
	switch in.kind {
	case obeyCall:
		in.tool, i = word(s, i)
		if !toolPattern.MatchString(in.tool) {
			return in, 0, false
		}
		i = skipSpace(s, i)
		if i >= len(s) || s[i] != '{' {
			return in, 0, false
		}
		// Decode the object from its "{": its strings may contain "]]".
		dec := json.NewDecoder(strings.NewReader(s[i:]))
		if err := dec.Decode(&in.args); err != nil {
			return in, 0, false
		}
		i += int(dec.InputOffset())
	case obeyShareRecorded, obeyAnswerAdjust, obeyAnswerReport, obeySet:
		var target string
		target, i = word(s, i)
		m := targetPattern.FindStringSubmatch(target)
		if m == nil {
			return in, 0, false
		}
		in.app, in.field = m[1], m[2]
		i = skipSpace(s, i)
		switch in.kind {
		case obeyAnswerAdjust:
			var delta string
			delta, i = word(s, i)
			if !deltaPattern.MatchString(delta) {
				return in, 0, false
			}
			in.delta, _ = strconv.ParseFloat(delta, 64) // the pattern guarantees a number
		case obeyAnswerReport, obeySet:
			// A JSON scalar, or for set also an array or object.
			dec := json.NewDecoder(strings.NewReader(s[i:]))
			if err := dec.Decode(&in.value); err != nil || in.kind == obeyAnswerReport && strings.ContainsAny(string(in.value[:1]), "[{") {
				return in, 0, false
			}
			i += int(dec.InputOffset())
		}
	case obeyPlanDrop:
		in.app, i = word(s, i)
		if !appPattern.MatchString(in.app) {
			return in, 0, false
		}
	case obeyPlanFlood:
		in.tool, i = word(s, i)
		if !toolPattern.MatchString(in.tool) {
			return in, 0, false
		}
		i = skipSpace(s, i)
		var count string
		count, i = word(s, i)
		n, err := strconv.Atoi(count)
		if !countPattern.MatchString(count) || err != nil || n < 1 || n > maxFlood {
			return in, 0, false
		}
		in.count = n
	case obeyStyle:
		in.style, i = word(s, i)
		if in.style != "fiction" && in.style != "factual" {
			return in, 0, false
		}
	case obeySay, obeyAnswerReplace:
		if i >= len(s) || s[i] != '"' {
			return in, 0, false
		}
		dec := json.NewDecoder(strings.NewReader(s[i:]))
		if err := dec.Decode(&in.say); err != nil {
			return in, 0, false
		}
		i += int(dec.InputOffset())
	default:
		return in, 0, false
	}
	i = skipSpace(s, i)
	if !strings.HasPrefix(s[i:], "]]") {
		return in, 0, false
	}
	return in, i + 2, true
}

func skipSpace(s string, i int) int {
	for i < len(s) && isSpace(s[i]) {
		i++
	}
	return i
}

func isSpace(b byte) bool { return b == ' ' || b == '\t' || b == '\n' || b == '\r' }

// word returns the run of s from i up to white space or "]".
func word(s string, i int) (string, int) {
	j := i
	for j < len(s) && s[j] != ']' && !isSpace(s[j]) {
		j++
	}
	return s[i:j], j
}
