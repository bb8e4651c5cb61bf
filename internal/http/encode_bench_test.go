package httpapi

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// BenchmarkEventEncode encodes 64 KiB of `yes` lines (127 x's and a
// newline) as one output event's data, as the event stream does, beside a
// copy of the same bytes (the floor of any encoding).
func BenchmarkEventEncode(b *testing.B) {
	data := []byte(strings.Repeat(strings.Repeat("x", 127)+"\n", 512))
	out := make([]byte, 0, 2*len(data))
	b.Run("encode", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			if !utf8.Valid(data) {
				b.Fatal("not UTF-8")
			}
			out = appendJSONString(out[:0], data)
		}
	})
	b.Run("copy", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			out = append(out[:0], data...)
		}
	})
}
