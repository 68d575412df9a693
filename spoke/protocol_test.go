package spoke

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
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

// FuzzDecodeFrame: no input may panic the decoder, and anything it accepts
// is a well-formed frame of a kind a spoke may send.
func FuzzDecodeFrame(f *testing.F) {
	f.Add(frameBytes(`{"v":1,"kind":"llm","id":1,"body":{"messages":[]}}`))
	f.Add(frameBytes(`{"v":1,"kind":"result","id":2,"body":{"answer":"hi"}}`))
	f.Add([]byte{0, 0, 0, 1, '{'})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, data []byte) {
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
