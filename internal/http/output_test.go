package httpapi

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/dshd/dshd/internal/exec"
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

// TestPlainWord checks the eight-bytes-at-a-time test against the byte
// table: every byte value at every place of a word, alone among plain bytes
// and after another byte that needs escaping, and every byte at every
// offset of a longer run given to appendJSONString.
func TestPlainWord(t *testing.T) {
	for pos := range 8 {
		for v := range 256 {
			for _, fill := range []byte{'a', 0xe9, '~', ' '} {
				w := bytes.Repeat([]byte{fill}, 8)
				w[pos] = byte(v)
				if got, want := plainWord(binary.LittleEndian.Uint64(w)), jsonSafe[v] && jsonSafe[fill]; got != want {
					t.Fatalf("plainWord(%q) = %v, want %v", w, got, want)
				}
				if pos > 0 {
					w[0] = '"'
					if plainWord(binary.LittleEndian.Uint64(w)) {
						t.Fatalf("plainWord(%q) = true", w)
					}
				}
			}
		}
	}
	for off := range 24 {
		for v := range 256 {
			in := bytes.Repeat([]byte{'x'}, 24)
			in[off] = byte(v)
			if !utf8.Valid(in) {
				continue
			}
			var got string
			if err := json.Unmarshal(appendJSONString(nil, in), &got); err != nil || got != string(in) {
				t.Fatalf("appendJSONString(%q) decodes to %q, %v", in, got, err)
			}
		}
	}
}

// TestEventStreamKeepAlive serves a real job's output while the job is
// silent for a while: the stream starts with the reconnection delay at once,
// sends keep-alive comments while idle, then the output and the exit event.
func TestEventStreamKeepAlive(t *testing.T) {
	x, err := exec.New(exec.Options{Home: t.TempDir(), DefaultCwd: t.TempDir(), Grace: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := x.Close(ctx); err != nil {
			t.Errorf("close executor: %v", err)
		}
	})
	job, err := x.Start(context.Background(), exec.Spec{Command: "sleep 0.4; echo done", Background: true})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s := &eventStream{ctx: r.Context(), job: job, keepAlive: 50 * time.Millisecond, logger: discardLogger()}
		if err := s.VisitGetJobOutputResponse(w); err != nil {
			t.Errorf("visit: %v", err)
		}
	}))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	got := string(body)
	if !strings.HasPrefix(got, "retry: 1000\n\n: keep-alive\n\n") {
		t.Errorf("stream does not start with the delay then a keep-alive: %q", got)
	}
	out := strings.Index(got, "id: 5.0\nevent: stdout\ndata: \"done\\n\"\n\n")
	exit := strings.Index(got, "id: 5.0.exit\nevent: exit\ndata: {")
	if out < 0 || exit < out || !strings.HasSuffix(got, "}\n\n") {
		t.Errorf("stream lacks the output event then the exit event, last: %q", got)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Errorf("Content-Type = %q", ct)
	}
}
