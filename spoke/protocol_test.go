package spoke

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"
)

func frameBytes(body string) []byte {
	b := make([]byte, 4+len(body))
	binary.BigEndian.PutUint32(b, uint32(len(body)))
	copy(b[4:], body)
	return b
}

func TestFrameRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	enc := NewEncoder(&buf, DefaultMaxFrame)
	want := Frame{Kind: KindLLM, ID: 7, Body: json.RawMessage(`{"messages":[]}`)}
	if err := enc.Encode(want); err != nil {
		t.Fatal(err)
	}
	got, err := NewHubDecoder(&buf, DefaultMaxFrame).Decode()
	if err != nil {
		t.Fatal(err)
	}
	if got.V != ProtocolVersion || got.Kind != want.Kind || got.ID != want.ID || string(got.Body) != string(want.Body) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
}

// TestEncodeAsMarshal: the encoder writes each frame as the JSON that
// json.Marshal would, length first, whatever its kind, error text and body
// (only unescaped: a body is written as it is).
func TestEncodeAsMarshal(t *testing.T) {
	frames := []Frame{
		{Kind: KindStep, ID: 1, Body: json.RawMessage(`{"id":"s1","args":{"text":"<b>&</b>"}}`)},
		{Kind: KindReply, ID: 1 << 63, Error: "refused: \"quoted\" <html> & \u2028 \x00 \xff"},
		{Kind: KindResult, ID: 0},
		{Kind: KindMemory, ID: 42, Body: json.RawMessage(`"just a string"`)},
	}
	for _, f := range frames {
		var buf bytes.Buffer
		if err := NewEncoder(&buf, DefaultMaxFrame).Encode(f); err != nil {
			t.Fatal(err)
		}
		f.V = ProtocolVersion
		want, err := json.Marshal(f)
		if err != nil {
			t.Fatal(err)
		}
		got := buf.Bytes()
		if n := binary.BigEndian.Uint32(got); int(n) != len(got)-4 {
			t.Fatalf("Encode(%s) wrote length %d before %d bytes", f.Kind, n, len(got)-4)
		}
		var gotV, wantV any
		if err := json.Unmarshal(got[4:], &gotV); err != nil {
			t.Fatalf("Encode(%s) wrote %q: %v", f.Kind, got, err)
		}
		if err := json.Unmarshal(want, &wantV); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(gotV, wantV) {
			t.Errorf("Encode(%s) wrote %q, want %s", f.Kind, got, want)
		}
	}
}

// writeCounter counts the writes made to it.
type writeCounter struct {
	bytes.Buffer
	writes int
}

func (w *writeCounter) Write(p []byte) (int, error) {
	w.writes++
	return w.Buffer.Write(p)
}

// TestHoldWritesWithNext: a held frame goes out with the next frame, in
// one write and in order; a next frame over the limit fails alone and
// leaves the held one for the frame after it.
func TestHoldWritesWithNext(t *testing.T) {
	var w writeCounter
	enc := NewEncoder(&w, 64)
	if err := enc.Hold(Frame{Kind: KindOutput, ID: 1, Body: json.RawMessage(`{"output":{}}`)}); err != nil {
		t.Fatal(err)
	}
	if w.writes != 0 {
		t.Fatalf("Hold wrote %d times, want 0", w.writes)
	}
	if err := enc.Encode(Frame{Kind: KindResult, ID: 2, Body: json.RawMessage(`"` + strings.Repeat("x", 64) + `"`)}); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("Encode() error = %v, want ErrFrameTooLarge", err)
	}
	if err := enc.Encode(Frame{Kind: KindResult, ID: 2, Body: json.RawMessage(`{}`)}); err != nil {
		t.Fatal(err)
	}
	if w.writes != 1 {
		t.Fatalf("%d writes, want 1", w.writes)
	}
	dec := NewHubDecoder(&w, 64)
	for _, want := range []Kind{KindOutput, KindResult} {
		f, err := dec.Decode()
		if err != nil || f.Kind != want {
			t.Fatalf("Decode() = %s, %v; want a %s frame", f.Kind, err, want)
		}
	}
	if _, err := dec.Decode(); !errors.Is(err, io.EOF) {
		t.Fatalf("after the frames: %v, want EOF", err)
	}
}

// TestHoldBounded: frames held beyond maxHeld bytes are written at once.
func TestHoldBounded(t *testing.T) {
	var w writeCounter
	enc := NewEncoder(&w, DefaultMaxFrame)
	body := json.RawMessage(`{"content":"` + strings.Repeat("x", 1000) + `"}`)
	for i := 0; w.writes == 0; i++ {
		if i > maxHeld/1000+1 {
			t.Fatalf("%d frames held and none written", i)
		}
		if err := enc.Hold(Frame{Kind: KindMemory, ID: uint64(i), Body: body}); err != nil {
			t.Fatal(err)
		}
	}
}

func TestDecoderRefuses(t *testing.T) {
	tests := []struct {
		name  string
		input []byte
		max   int
		want  error
	}{
		{"over the limit", frameBytes(`{"v":1,"kind":"llm","id":1,"body":"` + strings.Repeat("x", 100) + `"}`), 64, ErrFrameTooLarge},
		{"declared length over the limit", []byte{0x7f, 0xff, 0xff, 0xff}, DefaultMaxFrame, ErrFrameTooLarge},
		{"empty frame", []byte{0, 0, 0, 0}, DefaultMaxFrame, ErrBadFrame},
		{"not JSON", frameBytes("hello"), DefaultMaxFrame, ErrBadFrame},
		{"wrong version", frameBytes(`{"v":2,"kind":"llm","id":1}`), DefaultMaxFrame, ErrBadFrame},
		{"unknown kind", frameBytes(`{"v":1,"kind":"exec","id":1}`), DefaultMaxFrame, ErrBadFrame},
		{"hub kind from a spoke", frameBytes(`{"v":1,"kind":"step","id":1}`), DefaultMaxFrame, ErrBadFrame},
		{"claimed identity", frameBytes(`{"v":1,"kind":"data","id":1,"from":"@bob:example.org"}`), DefaultMaxFrame, ErrBadFrame},
		{"trailing data", frameBytes(`{"v":1,"kind":"llm","id":1} {}`), DefaultMaxFrame, ErrBadFrame},
		{"truncated", frameBytes(`{"v":1,"kind":"llm","id":1}`)[:10], DefaultMaxFrame, io.ErrUnexpectedEOF},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewHubDecoder(bytes.NewReader(tt.input), tt.max).Decode()
			if !errors.Is(err, tt.want) {
				t.Fatalf("Decode() error = %v, want %v", err, tt.want)
			}
		})
	}
}

func TestEncoderRefusesOversize(t *testing.T) {
	enc := NewEncoder(io.Discard, 32)
	err := enc.Encode(Frame{Kind: KindResult, Body: json.RawMessage(`"` + strings.Repeat("x", 64) + `"`)})
	if !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("Encode() error = %v, want ErrFrameTooLarge", err)
	}
}

func TestDecodeBodyRefusesUnknownFields(t *testing.T) {
	var op DataOp
	err := DecodeBody(json.RawMessage(`{"op":"get","collection":"c","id":"x","user":"@bob:example.org"}`), &op)
	if !errors.Is(err, ErrBadFrame) {
		t.Fatalf("DecodeBody() error = %v, want ErrBadFrame", err)
	}
}

// sameAsStrict fails t when the fast reading of a frame (decodeEncoded)
// accepts what the strict one refuses, or reads it otherwise.
func sameAsStrict(t *testing.T, raw []byte) {
	t.Helper()
	fast, ok := decodeEncoded(raw)
	if !ok {
		return
	}
	strict, err := decodeStrict(raw)
	if err != nil {
		t.Fatalf("decodeEncoded accepted %q, which decodeStrict refuses: %v", raw, err)
	}
	if !reflect.DeepEqual(fast, strict) {
		t.Fatalf("%q: decodeEncoded read %+v, decodeStrict %+v", raw, fast, strict)
	}
}

// TestDecodeEncoded: the encoder's own frames take the fast reading, and
// read as the strict decoder reads them; anything else is left to it.
func TestDecodeEncoded(t *testing.T) {
	for _, f := range []Frame{
		{Kind: KindLLM, ID: 7, Body: json.RawMessage(`{"messages":[{"role":"user","content":"}\"{"}]}`)},
		{Kind: KindResult, ID: 0},
		{Kind: KindMemory, ID: 1<<64 - 1, Body: json.RawMessage(`"s"`)},
	} {
		var buf bytes.Buffer
		if err := NewEncoder(&buf, DefaultMaxFrame).Encode(f); err != nil {
			t.Fatal(err)
		}
		raw := buf.Bytes()[4:]
		if _, ok := decodeEncoded(raw); !ok {
			t.Errorf("%q: not read fast", raw)
		}
		sameAsStrict(t, raw)
	}
	for _, raw := range []string{
		`{"v":1,"kind":"llm","id":1,"body":{},"user":"@bob:example.org"}`,
		`{"v":1,"kind":"llm","id":1,"body":{}}}`,
		`{"v":1,"kind":"llm","id":1,"body":{} }`,
		`{"v":1,"kind":"llm","id":1,"body": {}}`,
		`{"v":1,"kind":"llm","id":01,"body":{}}`,
		`{"v":1,"kind":"llm","id":18446744073709551616}`,
		`{"v":1,"kind":"llm","id":1,"body":null}`,
		`{"v":1,"kind":"llm","id":1,"body":{"a":1},"error":"x"}`,
		`{"v":1,"kind":"llm","id":1,"body":{"a":1}, "kind":"step"}`,
		`{"v":1,"kind":"llm","id":1,"body":{"a":1,"b":}}`,
		`{"v":1,"kind":"l\u006cm","id":1}`,
		`{"v":1,"kind":"llm","id":1,"id":2}`,
	} {
		if f, ok := decodeEncoded([]byte(raw)); ok {
			t.Errorf("%s: read fast as %+v, want left to the strict decoder", raw, f)
		}
	}
}

// FuzzDecodeFrame: no input may panic the decoder, and anything it accepts
// is a well-formed frame of a kind a spoke may send.
func FuzzDecodeFrame(f *testing.F) {
	f.Add(frameBytes(`{"v":1,"kind":"llm","id":1,"body":{"messages":[]}}`))
	f.Add(frameBytes(`{"v":1,"kind":"result","id":2,"body":{"answer":"hi"}}`))
	f.Add([]byte{0, 0, 0, 1, '{'})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	f.Add(frameBytes(`{"v":1,"kind":"memory","id":3,"body":{"content":"x"} }`))
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 4 {
			sameAsStrict(t, data[4:])
		}
		dec := NewHubDecoder(bytes.NewReader(data), 4096)
		for i := 0; i < 4; i++ {
			fr, err := dec.Decode()
			if err != nil {
				return
			}
			if fr.V != ProtocolVersion || !spokeKinds[fr.Kind] {
				t.Fatalf("accepted bad frame %+v", fr)
			}
		}
	})
}

// TestWarmFramesRunsWhole: a spare's warm-up (warmFrames) runs each of its
// encodings, decodings and the validation to its end: one that failed
// would leave the rest cold and say nothing.
func TestWarmFramesRunsWhole(t *testing.T) {
	if err := warmFrames(); err != nil {
		t.Fatalf("warmFrames: %v", err)
	}
}
