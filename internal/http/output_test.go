package httpapi

import (
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf8"
)

// TestAppendJSONString checks the event encoder against encoding/json: every
// valid UTF-8 input decodes back to itself.
func TestAppendJSONString(t *testing.T) {
	inputs := []string{"", "plain", "a\nb\r\tc", strings.Repeat("x", 127) + "\n", "0123456\"89abcdef\\", "ab\x1fcdefgh\x7f\xc3\xa9\x00", `quote " and \ backslash`, "\x00\x01\x1f\x7f", "<&> stay", "€ 𝄞 é", "\u2028\u2029"}
	r := rand.New(rand.NewPCG(1, 2))
	for k := range 4000 {
		b := make([]byte, r.IntN(64))
		for i := range b {
			b[i] = byte(r.IntN(256))
			if k%2 == 0 && r.IntN(16) != 0 {
				b[i] = 'a' + byte(r.IntN(26)) // long plain runs, a special byte here and there
			}
		}
		if utf8.Valid(b) {
			inputs = append(inputs, string(b))
		} else {
			inputs = append(inputs, strings.ToValidUTF8(string(b), "\uFFFD"))
		}
	}
	for _, in := range inputs {
		enc := appendJSONString([]byte("prefix"), []byte(in))
		if !strings.HasPrefix(string(enc), "prefix") {
			t.Fatalf("appendJSONString dropped what was before it")
		}
		enc = enc[len("prefix"):]
		var got string
		if err := json.Unmarshal(enc, &got); err != nil {
			t.Fatalf("appendJSONString(%q) = %s: not JSON: %v", in, enc, err)
		}
		if got != in {
			t.Errorf("appendJSONString(%q) decodes to %q", in, got)
		}
		if strings.ContainsAny(string(enc), "\n\r") {
			t.Errorf("appendJSONString(%q) = %q holds a line break, which would end the data line", in, enc)
		}
	}
}
