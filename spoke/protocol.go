package spoke

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/secgpt/secgpt/apps"
	"github.com/secgpt/secgpt/llm"
)

// ProtocolVersion is the ISC version every frame carries.
const ProtocolVersion = 1

// DefaultMaxFrame is the default hard limit on one frame's JSON body.
const DefaultMaxFrame = 1 << 20

// Kind is the type of an ISC frame.
type Kind string

// Frames from the hub to a spoke.
const (
	// KindStep starts one step; its body is a Step.
	KindStep Kind = "step"
	// KindReply answers a spoke's request with the same ID.
	KindReply Kind = "reply"
)

// Frames from a spoke to the hub. Every one but KindReady, KindMemory,
// KindOutput and KindResult is a request the hub answers with a KindReply
// of the same ID.
const (
	// KindReady is the spoke's first frame, sent after its sandbox is applied.
	KindReady Kind = "ready"
	// KindLLM asks for one chat completion (LLMRequest → LLMReply).
	KindLLM Kind = "llm"
	// KindProbe asks for another app's function schemas (Probe → ProbeReply).
	KindProbe Kind = "probe"
	// KindAppCall asks the hub to run another app's function (AppCall → AppCallReply).
	KindAppCall Kind = "app_call"
	// KindHTTP asks the egress broker for one HTTP exchange (HTTPRequest → HTTPResponse).
	KindHTTP Kind = "http"
	// KindMemory appends to the spoke's own (user, app) memory; its body
	// is a MemoryAppend and it gets no reply: nothing the spoke does
	// depends on the write, and a reply cost the hub a write and the
	// spoke a wakeup at the end of every step. The hub serves it before
	// the frames after it (the step's result), and logs a refusal.
	KindMemory Kind = "memory"
	// KindData reads or writes the app's own per-user data (DataOp → DataReply).
	KindData Kind = "data"
	// KindTunnel asks the egress broker to carry one TLS connection of an
	// external app's server (TunnelRequest → TunnelReply); the connection
	// itself crosses on the spoke's tunnel socket (see TunnelFD).
	KindTunnel Kind = "tunnel"
	// KindOutput reports, during a step that writes an answer, the planned
	// function's result as soon as it is known, before the spoke's model
	// writes the answer from it; its body is an Output and it gets no
	// reply. The hub checks it as it checks a result's Output, and may pass
	// it on (to later steps, to the combiner) while the answer is written.
	KindOutput Kind = "output"
	// KindResult ends a step; its ID is the step's frame ID and its body a Result.
	KindResult Kind = "result"
)

var spokeKinds = map[Kind]bool{
	KindReady: true, KindLLM: true, KindProbe: true, KindAppCall: true,
	KindHTTP: true, KindMemory: true, KindData: true, KindOutput: true, KindResult: true,
	KindTunnel: true,
}

var hubKinds = map[Kind]bool{KindStep: true, KindReply: true}

// Frame is one ISC message. On the wire: a 4-byte big-endian length, then the
// frame as JSON. The hub never reads identity from a frame: the channel is
// the identity, so Frame has no sender field and unknown fields are refused.
type Frame struct {
	V     int             `json:"v"`
	Kind  Kind            `json:"kind"`
	ID    uint64          `json:"id"`
	Body  json.RawMessage `json:"body,omitempty"`
	Error string          `json:"error,omitempty"`
}

// Errors from the codec. Each ends the spoke that caused it.
var (
	ErrFrameTooLarge = errors.New("frame over the size limit")
	ErrBadFrame      = errors.New("malformed frame")
)

// Encoder writes frames. It is not safe for concurrent use.
type Encoder struct {
	w   io.Writer
	max int
	// buf holds the frames being written, beginning with those held for
	// the next write (Hold); it is kept between writes.
	buf  []byte
	held int
}

// Bounds on an Encoder's buffer: frames held beyond maxHeld are written
// at once, and a buffer grown beyond keepBuf by a large frame is not kept.
const (
	maxHeld = 64 << 10
	keepBuf = 64 << 10
)

// NewEncoder returns an encoder that refuses frames over max bytes.
func NewEncoder(w io.Writer, max int) *Encoder { return &Encoder{w: rawSocket(w), max: max} }

// Encode writes one frame, after any frames held for it, in one write.
// Its Body must be JSON, as json.Marshal writes it: the encoder does not
// scan it again (that cost as much as decoding it), and the peer's decoder
// refuses a frame that is not JSON.
func (e *Encoder) Encode(f Frame) error {
	if err := e.append(f); err != nil {
		return err
	}
	return e.flush()
}

// Hold encodes one frame that asks for no reply and keeps it for the next
// Encode, which writes both at once: a frame the peer need not see before
// the next one (KindMemory, KindOutput) then costs neither side a system
// call or a wakeup of its own. Held frames are written in order, before
// the frame that follows them, and at once beyond maxHeld bytes; a caller
// must Encode a frame after the last it held.
func (e *Encoder) Hold(f Frame) error {
	if err := e.append(f); err != nil {
		return err
	}
	e.held = len(e.buf)
	if e.held > maxHeld {
		return e.flush()
	}
	return nil
}

// append encodes f after the held frames, as json.Marshal would but
// without checking, compacting and copying a body that is already JSON; a
// frame that fails leaves the held frames as they were.
func (e *Encoder) append(f Frame) error {
	start := len(e.buf)
	b := append(e.buf, 0, 0, 0, 0)
	b = append(b, `{"v":`...)
	b = strconv.AppendInt(b, ProtocolVersion, 10)
	b = append(b, `,"kind":`...)
	b = appendString(b, string(f.Kind))
	b = append(b, `,"id":`...)
	b = strconv.AppendUint(b, f.ID, 10)
	if len(f.Body) > 0 {
		b = append(b, `,"body":`...)
		b = append(b, f.Body...)
	}
	if f.Error != "" {
		b = append(b, `,"error":`...)
		b = appendString(b, f.Error)
	}
	b = append(b, '}')
	n := len(b) - start - 4
	if n > e.max {
		e.buf = b[:start]
		return fmt.Errorf("failed to encode %s frame of %d bytes: %w", f.Kind, n, ErrFrameTooLarge)
	}
	binary.BigEndian.PutUint32(b[start:], uint32(n))
	e.buf = b
	return nil
}

// appendString appends s as a JSON string.
func appendString(b []byte, s string) []byte {
	q, _ := json.Marshal(s) // a string always encodes
	return append(b, q...)
}

// flush writes the buffer; whatever the outcome, it is then empty.
func (e *Encoder) flush() error {
	_, err := e.w.Write(e.buf)
	e.held = 0
	if cap(e.buf) > keepBuf {
		e.buf = nil
	} else {
		e.buf = e.buf[:0]
	}
	if err != nil {
		return fmt.Errorf("failed to write frame: %w", err)
	}
	return nil
}

// Decoder reads frames. It is not safe for concurrent use.
type Decoder struct {
	r     *bufio.Reader
	max   int
	kinds map[Kind]bool
}

// NewHubDecoder reads frames a spoke sends to the hub. A Unix socket
// (the hub's end of a spoke's channel), like NewEncoder's, is read with
// raw system calls (rawSocket).
func NewHubDecoder(r io.Reader, max int) *Decoder {
	return &Decoder{r: bufio.NewReader(rawSocket(r)), max: max, kinds: spokeKinds}
}

// NewSpokeDecoder reads frames the hub sends to a spoke.
func NewSpokeDecoder(r io.Reader, max int) *Decoder {
	return &Decoder{r: bufio.NewReader(r), max: max, kinds: hubKinds}
}

// Decode reads one frame. A frame over the limit, malformed JSON, a wrong
// version or a kind the peer may not send is an error; the caller must then
// end the channel.
func (d *Decoder) Decode() (Frame, error) {
	buf, err := d.read()
	if err != nil {
		return Frame{}, err
	}
	return decodeFrame(buf, d.kinds)
}

// decodeTimed is Decode that also says how much CPU time decoding the
// frame's bytes took, once they had arrived: the reader's own work, not the
// wait (see hubtime.go).
func (d *Decoder) decodeTimed() (Frame, time.Duration, error) {
	buf, err := d.read()
	if err != nil {
		return Frame{}, 0, err
	}
	var f Frame
	took := cpuOf(func() { f, err = decodeFrame(buf, d.kinds) })
	return f, took, err
}

// read reads one frame's bytes, within the limit.
func (d *Decoder) read() ([]byte, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(d.r, hdr[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n == 0 {
		return nil, fmt.Errorf("empty frame: %w", ErrBadFrame)
	}
	if int64(n) > int64(d.max) {
		return nil, fmt.Errorf("frame of %d bytes: %w", n, ErrFrameTooLarge)
	}
	buf := make([]byte, n)
	if _, err := io.ReadFull(d.r, buf); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	return buf, nil
}

func decodeFrame(buf []byte, kinds map[Kind]bool) (Frame, error) {
	f, ok := decodeEncoded(buf)
	if !ok {
		var err error
		if f, err = decodeStrict(buf); err != nil {
			return Frame{}, err
		}
	}
	if f.V != ProtocolVersion {
		return Frame{}, fmt.Errorf("%w: version %d, want %d", ErrBadFrame, f.V, ProtocolVersion)
	}
	if !kinds[f.Kind] {
		return Frame{}, fmt.Errorf("%w: unexpected kind %q", ErrBadFrame, f.Kind)
	}
	return f, nil
}

// encodedHead is how the Encoder begins every frame (see append).
var encodedHead = []byte(`{"v":` + strconv.Itoa(ProtocolVersion) + `,"kind":"`)

// decodeEncoded reads a frame as this package's Encoder writes it with
// no error text, `{"v":1,"kind":"<kind>","id":<id>,"body":<body>}` (or
// without body), in one scan of the body instead of the three of a
// json.Decoder (its length, its decoding, the copy of the body); the body
// is buf's own bytes. It accepts only what decodeStrict accepts, and
// reads it the same way; anything else, ok false, is left to it.
func decodeEncoded(buf []byte) (f Frame, ok bool) {
	rest, found := bytes.CutPrefix(buf, encodedHead)
	if !found {
		return Frame{}, false
	}
	i := 0
	for i < len(rest) && (rest[i] >= 'a' && rest[i] <= 'z' || rest[i] == '_') {
		i++
	}
	kind := Kind(rest[:i])
	if rest, found = bytes.CutPrefix(rest[i:], []byte(`","id":`)); !found {
		return Frame{}, false
	}
	i = 0
	for i < len(rest) && rest[i] >= '0' && rest[i] <= '9' {
		i++
	}
	if i == 0 || i > 1 && rest[0] == '0' {
		return Frame{}, false // no number, or one JSON does not allow
	}
	id, err := strconv.ParseUint(string(rest[:i]), 10, 64)
	if err != nil {
		return Frame{}, false
	}
	f = Frame{V: ProtocolVersion, Kind: kind, ID: id}
	rest = rest[i:]
	if string(rest) == "}" {
		return f, true
	}
	body, found := bytes.CutPrefix(rest, []byte(`,"body":`))
	if !found || len(body) < 2 || body[len(body)-1] != '}' {
		return Frame{}, false
	}
	// One JSON value, then the closing brace: a body followed by more
	// members (an error, anything else) is not one value.
	body = body[:len(body)-1]
	if len(bytes.TrimSpace(body)) != len(body) || string(body) == "null" || !json.Valid(body) {
		return Frame{}, false
	}
	f.Body = body
	return f, true
}

// decodeStrict reads any frame, refusing unknown fields and trailing data.
func decodeStrict(buf []byte) (Frame, error) {
	dec := json.NewDecoder(bytes.NewReader(buf))
	dec.DisallowUnknownFields()
	var f Frame
	if err := dec.Decode(&f); err != nil {
		return Frame{}, fmt.Errorf("%w: %v", ErrBadFrame, err)
	}
	if dec.More() {
		return Frame{}, fmt.Errorf("%w: trailing data", ErrBadFrame)
	}
	return f, nil
}

// DecodeBody strictly decodes a frame body into v.
func DecodeBody(body json.RawMessage, v any) error {
	if len(body) == 0 {
		body = []byte("{}")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%w: %v", ErrBadFrame, err)
	}
	if dec.More() {
		return fmt.Errorf("%w: trailing data in body", ErrBadFrame)
	}
	return nil
}

// Ready is the spoke's first frame.
type Ready struct {
	PID int `json:"pid"`
	// Sandbox lists the protections the child applied, for the log.
	Sandbox []string `json:"sandbox,omitempty"`
}

// Step is one unit of work for a spoke.
type Step struct {
	// ID names the step within its query.
	ID string `json:"id"`
	// Function is the app function the plan named; empty for vanilla spokes.
	Function string `json:"function,omitempty"`
	// Args are the plan's arguments for Function, already checked by the hub.
	Args json.RawMessage `json:"args,omitempty"`
	// ArgsComplete says the hub found Args to satisfy Function's request
	// schema: the spoke runs Function with them at once, without asking
	// its model and without checking them again. Unset, the spoke checks
	// them itself (the hub's word is only ever a shortcut: arguments it
	// did not mark are still run when they satisfy the schema).
	ArgsComplete bool `json:"args_complete,omitempty"`
	// Query is the user's request, given only to the spoke that answers it.
	Query string `json:"query,omitempty"`
	// Answer says this spoke writes the final answer to the user.
	Answer bool `json:"answer,omitempty"`
	// Memory is the spoke's own (user, app) memory, oldest first.
	Memory []string `json:"memory,omitempty"`
	// History is the conversation as the no-app assistant may see it, for
	// vanilla spokes only: the user's messages, and answers no app shaped.
	History []llm.Message `json:"history,omitempty"`
	// Results are the typed fields of several apps' results, for the
	// vanilla spoke that writes the cross-app part of an answer (the
	// combiner) only: never a string an app wrote.
	Results []StepOutput `json:"results,omitempty"`
	// Functions are the hosted app's functions its model may be offered:
	// those the plan names. Empty offers only Function.
	Functions []string `json:"functions,omitempty"`
	// OtherTools are the tool names of other apps' functions the plan lets
	// this app call: names only, never their text.
	OtherTools []string `json:"other_tools,omitempty"`
	// MaxLLMCalls bounds this step's completions; the hub enforces it too.
	MaxLLMCalls int `json:"max_llm_calls"`
	// Describe asks the spoke for its app's spec instead of any work: the
	// Result's Output is the apps.Spec as JSON. Only discovery sends it
	// (see Describe).
	Describe bool `json:"describe,omitempty"`
}

// StepOutput is one step's typed fields, as shown to the combiner.
type StepOutput struct {
	Tool   string          `json:"tool"`
	Args   json.RawMessage `json:"args"`
	Result json.RawMessage `json:"result"`
}

// Result ends a step.
type Result struct {
	// Output is the result of the step's Function, checked by the hub
	// against the function's response schema. Empty for vanilla spokes.
	Output json.RawMessage `json:"output,omitempty"`
	// Answer is the text for the user when the step was the answering one.
	Answer string `json:"answer,omitempty"`
	// Error says why the step failed, in words for the user.
	Error string `json:"error,omitempty"`
	// Diagnosis, when an external app's server failed, says why in parts
	// (exit, refused syscalls, last stderr lines); Error is its one line.
	Diagnosis *Diagnosis `json:"diagnosis,omitempty"`
	// Calls are the function calls the spoke ran or saw refused during the
	// step, as the spoke reports them: for the record, never for a decision.
	Calls []CallLog `json:"calls,omitempty"`
}

// CallLog is one function call a spoke reports.
type CallLog struct {
	Tool   string          `json:"tool"`
	Args   json.RawMessage `json:"args,omitempty"`
	Result json.RawMessage `json:"result,omitempty"`
	Error  string          `json:"error,omitempty"`
}

// Output is the body of a KindOutput frame.
type Output struct {
	Output json.RawMessage `json:"output"`
}

// LLMRequest asks the hub for one completion. It carries no model and no
// key: the hub chooses both.
type LLMRequest struct {
	Messages []llm.Message `json:"messages"`
	Tools    []llm.Tool    `json:"tools,omitempty"`
}

// LLMReply is the hub's answer to an LLMRequest. Tool calls outside the
// query's capability set have been removed from Message and are listed in
// Refused: the spoke must record them as refused and never run them.
type LLMReply struct {
	Message llm.Message   `json:"message"`
	Refused []RefusedCall `json:"refused,omitempty"`
}

// RefusedCall is a tool call the hub refused before the spoke saw it.
type RefusedCall struct {
	ID     string `json:"id"`
	Name   string `json:"name"`
	Reason string `json:"reason"`
}

// Probe asks for another app's function schemas by tool name.
type Probe struct {
	Tool string `json:"tool"`
}

// ProbeReply carries the function's schemas.
type ProbeReply struct {
	Request  json.RawMessage `json:"request"`
	Response json.RawMessage `json:"response"`
}

// AppCall asks the hub to run another app's function.
type AppCall struct {
	Tool string          `json:"tool"`
	Args json.RawMessage `json:"args"`
}

// AppCallReply carries the callee's result, validated against its response
// schema and released by the user's consent.
type AppCallReply struct {
	Result json.RawMessage `json:"result"`
}

// HTTPRequest is one request for the egress broker.
type HTTPRequest struct {
	Method string              `json:"method"`
	URL    string              `json:"url"`
	Header map[string][]string `json:"header,omitempty"`
	Body   []byte              `json:"body,omitempty"`
}

// HTTPResponse is the broker's answer.
type HTTPResponse struct {
	Status int                 `json:"status"`
	Header map[string][]string `json:"header,omitempty"`
	Body   []byte              `json:"body,omitempty"`
}

// TunnelRequest asks the broker to carry the TCP connection the spoke sent
// on its tunnel socket just before, in a message carrying Seq.
type TunnelRequest struct {
	Seq uint64 `json:"seq"`
}

// TunnelReply says which server the broker connected the tunnel to.
type TunnelReply struct {
	Host string `json:"host"`
}

// MemoryAppend adds one entry to the spoke's own memory.
type MemoryAppend struct {
	Content string `json:"content"`
}

// Data operations.
const (
	DataGet    = "get"
	DataPut    = "put"
	DataDelete = "delete"
	DataList   = "list"
)

// DataOp reads or writes the app's own per-user data.
type DataOp struct {
	Op         string          `json:"op"`
	Collection string          `json:"collection"`
	ID         string          `json:"id,omitempty"`
	Body       json.RawMessage `json:"body,omitempty"`
	Limit      int             `json:"limit,omitempty"`
}

// DataReply answers a DataOp. NotFound mirrors apps.ErrNotFound.
type DataReply struct {
	Body     json.RawMessage `json:"body,omitempty"`
	Docs     []apps.Doc      `json:"docs,omitempty"`
	NotFound bool            `json:"not_found,omitempty"`
}
