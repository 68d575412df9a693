package ollamatest

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
)

// The tiny model: a Llama-architecture transformer small enough to run on
// two cores at once, with a byte-level BPE vocabulary (every byte is a
// token), so any text tokenizes. Its weights are random but for the output
// layer, which favours ending the answer, so that answers stay short.
const (
	embedding  = 32
	heads      = 2
	feedFwd    = 64
	blocks     = 1
	contextLen = 131072
	bos, eos   = 256, 257
	vocabSize  = 258
	alignment  = 32
)

// GGUF value types (ggml's gguf.h).
const (
	ggufUint32  = 4
	ggufFloat32 = 6
	ggufBool    = 7
	ggufString  = 8
	ggufArray   = 9
	ggufInt32   = 5
)

// WriteTinyModel writes the tiny model as a GGUF file (version 3, every
// tensor in float32) at path.
func WriteTinyModel(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("failed to create the model file: %w", err)
	}
	w := bufio.NewWriter(f)
	werr := writeGGUF(w)
	if err := w.Flush(); werr == nil {
		werr = err
	}
	if err := f.Close(); werr == nil {
		werr = err
	}
	if werr != nil {
		return fmt.Errorf("failed to write the model file: %w", werr)
	}
	return nil
}

type kv struct {
	key   string
	value any // uint32, float32, bool, string, []string, []int32
}

type tensor struct {
	name string
	dims []uint64 // innermost first, as GGUF writes them
	data []float32
}

func writeGGUF(w io.Writer) error {
	tokens, types := byteVocabulary()
	meta := []kv{
		{"general.architecture", "llama"},
		{"general.name", "secgpt-tiny"},
		{"general.alignment", uint32(alignment)},
		{"llama.block_count", uint32(blocks)},
		{"llama.context_length", uint32(contextLen)},
		{"llama.embedding_length", uint32(embedding)},
		{"llama.feed_forward_length", uint32(feedFwd)},
		{"llama.attention.head_count", uint32(heads)},
		{"llama.attention.head_count_kv", uint32(heads)},
		{"llama.attention.layer_norm_rms_epsilon", float32(1e-5)},
		{"llama.rope.freq_base", float32(10000)},
		{"llama.rope.dimension_count", uint32(embedding / heads)},
		{"llama.vocab_size", uint32(vocabSize)},
		{"tokenizer.ggml.model", "gpt2"},
		{"tokenizer.ggml.pre", "default"},
		{"tokenizer.ggml.tokens", tokens},
		{"tokenizer.ggml.token_type", types},
		{"tokenizer.ggml.merges", []string{}},
		{"tokenizer.ggml.bos_token_id", uint32(bos)},
		{"tokenizer.ggml.eos_token_id", uint32(eos)},
		{"tokenizer.ggml.add_bos_token", false},
	}
	tensors := tinyTensors()

	le := binary.LittleEndian
	put := func(v any) error { return binary.Write(w, le, v) }
	putString := func(s string) error {
		if err := put(uint64(len(s))); err != nil {
			return err
		}
		_, err := io.WriteString(w, s)
		return err
	}
	if _, err := io.WriteString(w, "GGUF"); err != nil {
		return err
	}
	for _, v := range []any{uint32(3), uint64(len(tensors)), uint64(len(meta))} {
		if err := put(v); err != nil {
			return err
		}
	}
	for _, m := range meta {
		if err := putString(m.key); err != nil {
			return err
		}
		var err error
		switch v := m.value.(type) {
		case uint32:
			err = writeAll(put, uint32(ggufUint32), v)
		case float32:
			err = writeAll(put, uint32(ggufFloat32), v)
		case bool:
			err = writeAll(put, uint32(ggufBool), v)
		case string:
			if err = put(uint32(ggufString)); err == nil {
				err = putString(v)
			}
		case []string:
			err = writeAll(put, uint32(ggufArray), uint32(ggufString), uint64(len(v)))
			for _, s := range v {
				if err == nil {
					err = putString(s)
				}
			}
		case []int32:
			err = writeAll(put, uint32(ggufArray), uint32(ggufInt32), uint64(len(v)), v)
		default:
			err = fmt.Errorf("no GGUF type for %T", v)
		}
		if err != nil {
			return err
		}
	}
	offset := uint64(0)
	for _, t := range tensors {
		if err := putString(t.name); err != nil {
			return err
		}
		if err := writeAll(put, uint32(len(t.dims)), t.dims, uint32(0) /* F32 */, offset); err != nil {
			return err
		}
		offset += padded(uint64(len(t.data)) * 4)
	}
	// The header is padded to the alignment; so is every tensor.
	header := headerSize(meta, tensors)
	if _, err := w.Write(make([]byte, padded(header)-header)); err != nil {
		return err
	}
	for _, t := range tensors {
		if err := put(t.data); err != nil {
			return err
		}
		size := uint64(len(t.data)) * 4
		if _, err := w.Write(make([]byte, padded(size)-size)); err != nil {
			return err
		}
	}
	return nil
}

func writeAll(put func(any) error, vs ...any) error {
	for _, v := range vs {
		if err := put(v); err != nil {
			return err
		}
	}
	return nil
}

func padded(n uint64) uint64 { return (n + alignment - 1) / alignment * alignment }

// headerSize is the byte size of the magic, counts, metadata and tensor
// infos, as writeGGUF writes them.
func headerSize(meta []kv, tensors []tensor) uint64 {
	str := func(s string) uint64 { return 8 + uint64(len(s)) }
	n := uint64(4 + 4 + 8 + 8)
	for _, m := range meta {
		n += str(m.key) + 4
		switch v := m.value.(type) {
		case uint32, float32:
			n += 4
		case bool:
			n++
		case string:
			n += str(v)
		case []string:
			n += 4 + 8
			for _, s := range v {
				n += str(s)
			}
		case []int32:
			n += 4 + 8 + 4*uint64(len(v))
		}
	}
	for _, t := range tensors {
		n += str(t.name) + 4 + 8*uint64(len(t.dims)) + 4 + 8
	}
	return n
}

// byteVocabulary is GPT-2's byte-level vocabulary: each byte as the
// character GPT-2's byte encoder maps it to, then the control tokens.
func byteVocabulary() ([]string, []int32) {
	tokens := make([]string, vocabSize)
	types := make([]int32, vocabSize)
	next := rune(256)
	for b := 0; b < 256; b++ {
		r := rune(b)
		if !(b >= '!' && b <= '~' || b >= 0xA1 && b <= 0xAC || b >= 0xAE && b <= 0xFF) {
			r, next = next, next+1
		}
		tokens[b], types[b] = string(r), 1 // normal
	}
	tokens[bos], types[bos] = "<|begin_of_text|>", 3 // control
	tokens[eos], types[eos] = "<|end_of_text|>", 3
	return tokens, types
}

// headStart are the logits the output layer adds to a few tokens: the end
// of text (an answer of some twenty tokens), and the closing quote,
// bracket and brace, so that JSON a grammar makes it write is short.
var headStart = map[int]float32{eos: 2.6, '"': 3, ']': 3, '}': 3}

// tinyTensors are the model's weights: random, from a fixed seed, but for
// one dimension of the residual stream, which every token's embedding
// sets high (about 3.8 after the norm), and which the output layer reads
// only for the tokens of headStart.
func tinyTensors() []tensor {
	rng := rand.New(rand.NewPCG(14, 14))
	random := func(n int, scale float64) []float32 {
		out := make([]float32, n)
		for i := range out {
			out[i] = float32(rng.NormFloat64() * scale)
		}
		return out
	}
	ones := func(n int) []float32 {
		out := make([]float32, n)
		for i := range out {
			out[i] = 1
		}
		return out
	}
	e, ff := uint64(embedding), uint64(feedFwd)
	embd := random(embedding*vocabSize, 1)
	for tok := range vocabSize {
		embd[tok*embedding] = 5
	}
	ts := []tensor{{"token_embd.weight", []uint64{e, vocabSize}, embd}}
	for i := range blocks {
		p := fmt.Sprintf("blk.%d.", i)
		small := 1 / math.Sqrt(embedding)
		ts = append(ts,
			tensor{p + "attn_norm.weight", []uint64{e}, ones(embedding)},
			tensor{p + "attn_q.weight", []uint64{e, e}, random(embedding*embedding, small)},
			tensor{p + "attn_k.weight", []uint64{e, e}, random(embedding*embedding, small)},
			tensor{p + "attn_v.weight", []uint64{e, e}, random(embedding*embedding, small)},
			tensor{p + "attn_output.weight", []uint64{e, e}, random(embedding*embedding, small)},
			tensor{p + "ffn_norm.weight", []uint64{e}, ones(embedding)},
			tensor{p + "ffn_gate.weight", []uint64{e, ff}, random(embedding*feedFwd, small)},
			tensor{p + "ffn_up.weight", []uint64{e, ff}, random(embedding*feedFwd, small)},
			tensor{p + "ffn_down.weight", []uint64{ff, e}, random(feedFwd*embedding, 1/math.Sqrt(feedFwd))},
		)
	}
	out := random(embedding*vocabSize, 0.02)
	for tok := range vocabSize {
		out[tok*embedding] = headStart[tok] / 3.8
	}
	ts = append(ts,
		tensor{"output_norm.weight", []uint64{e}, ones(embedding)},
		tensor{"output.weight", []uint64{e, vocabSize}, out},
	)
	return ts
}
