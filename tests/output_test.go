package tests

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// openEvents opens a job's event stream with an optional Last-Event-ID; the
// request is cancelled when ctx ends.
func (s *testServer) openEvents(t *testing.T, ctx context.Context, id, lastID string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, "GET", s.URL+"/jobs/"+id+"/output", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+s.Token)
	req.Header.Set("Accept", "text/event-stream")
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET output: %v", err)
	}
	return resp
}

// decodedStream is what a client rebuilds from an event stream.
type decodedStream struct {
	out, err bytes.Buffer
	events   []wireEvent // with Data copied
	exit     *wireEvent
}

// readStream decodes events until the exit event, the end of the stream,
// or limit output events (limit < 0: no limit). Every output event's id
// must equal the byte counts decoded so far, counted from start.
func readStream(t *testing.T, body io.Reader, start [2]int64, limit int) (*decodedStream, error) {
	t.Helper()
	d := &decodedStream{}
	c := newSSEClient(body)
	for limit != 0 {
		ev, err := c.Next()
		if err != nil {
			return d, err
		}
		ev.Data = bytes.Clone(ev.Data)
		d.events = append(d.events, ev)
		switch ev.Name {
		case "stdout", "stderr":
			buf := &d.out
			if ev.Name == "stderr" {
				buf = &d.err
			}
			b, err := decodeChunk(nil, ev.Data)
			if err != nil {
				t.Fatalf("event %q: %v", ev.Data, err)
			}
			buf.Write(b)
			want := fmt.Sprintf("%d.%d", start[0]+int64(d.out.Len()), start[1]+int64(d.err.Len()))
			if ev.ID != want {
				t.Fatalf("event id %q after %d+%d decoded bytes, want %q", ev.ID, d.out.Len(), d.err.Len(), want)
			}
			limit--
		case "exit":
			d.exit = &ev
			return d, nil
		default:
			t.Fatalf("unexpected event %q", ev.Name)
		}
	}
	return d, nil
}

// followToExit reads a job's whole event stream within 20 s.
func (s *testServer) followToExit(t *testing.T, id, lastID string, start [2]int64) *decodedStream {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	resp := s.openEvents(t, ctx, id, lastID)
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("GET output = %d, want 200", resp.StatusCode)
	}
	d, err := readStream(t, resp.Body, start, -1)
	if d.exit == nil {
		t.Fatalf("no exit event (stream ended: %v) after stdout %q, stderr %q", err, d.out.Bytes(), d.err.Bytes())
	}
	return d
}

// TestSSEOutputEndingInsideACharacter: output that stops in the middle of a
// UTF-8 character still ends with its exit event, and those last bytes are
// delivered exactly, whether the follower attaches while the job runs or
// after it ended.
func TestSSEOutputEndingInsideACharacter(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	for _, tc := range []struct {
		name, cmd        string
		late             bool
		wantOut, wantErr string
	}{
		{"attached while running", `printf 'A\xe2'; sleep 0.5`, false, "A\xe2", ""},
		{"attached after the end", `printf 'A\xe2'`, true, "A\xe2", ""},
		{"stderr, attached while running", `printf 'B\xf0\x9f' >&2; sleep 0.5`, false, "", "B\xf0\x9f"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var j job
			if st := s.DoJSON(t, "POST", "/exec", map[string]any{"command": tc.cmd, "background": true}, &j); st != 202 {
				t.Fatalf("exec = %d", st)
			}
			if tc.late {
				s.waitJob(t, j.ID)
			}
			d := s.followToExit(t, j.ID, "", [2]int64{})
			if d.out.String() != tc.wantOut || d.err.String() != tc.wantErr {
				t.Errorf("stdout %q, stderr %q; want %q, %q", d.out.Bytes(), d.err.Bytes(), tc.wantOut, tc.wantErr)
			}
		})
	}
}

// TestSSELossless: binary output travels over SSE byte for byte, text stays
// readable as JSON strings, event ids count raw bytes like the raw route's
// offsets, and a resume from any event id joins without loss or repeat.
func TestSSELossless(t *testing.T) {
	// Serial: the follower must be live through the job's 1 s pause, which
	// a loaded machine can make it miss.
	s := startServer(t)
	dir := t.TempDir()
	r := rand.New(rand.NewPCG(11, 17))
	bin := make([]byte, 600_000)
	for i := range bin {
		bin[i] = byte(r.IntN(256))
	}
	text := strings.Repeat("héllo wörld € 𝄞\n", 20000) // multi-byte characters across reads
	if err := os.WriteFile(filepath.Join(dir, "bin"), bin, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "text"), []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	// A character split across two writes with a pause between: the
	// follower must not split it across events.
	cmd := fmt.Sprintf(`cat %s/text; cat %s/bin >&2; printf '\xe2\x82'; sleep 1; printf '\xac'; sleep 1; cat %s/bin`, dir, dir, dir)
	var j job
	if st := s.DoJSON(t, "POST", "/exec", map[string]any{"command": cmd, "background": true}, &j); st != 202 {
		t.Fatalf("exec = %d", st)
	}
	wantOut := text + "€" + string(bin)
	wantErr := string(bin)

	// Read a few events while the job runs, leave, and resume from the last
	// id: together they are the whole output.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	resp := s.openEvents(t, ctx, j.ID, "")
	first, err := readStream(t, resp.Body, [2]int64{}, 3)
	resp.Body.Close()
	cancel()
	if err != nil || len(first.events) != 3 {
		t.Fatalf("read %d events before leaving: %v", len(first.events), err)
	}
	lastID := first.events[len(first.events)-1].ID
	var start [2]int64
	a, b, _ := strings.Cut(lastID, ".")
	start[0], _ = strconv.ParseInt(a, 10, 64)
	start[1], _ = strconv.ParseInt(b, 10, 64)
	rest := s.followToExit(t, j.ID, lastID, start)
	if got := first.out.String() + rest.out.String(); got != wantOut {
		t.Errorf("stdout over SSE (resumed at %s) differs: %d bytes, want %d", lastID, len(got), len(wantOut))
	}
	if got := first.err.String() + rest.err.String(); got != wantErr {
		t.Errorf("stderr over SSE (resumed at %s) differs: %d bytes, want %d", lastID, len(got), len(wantErr))
	}

	// The follower was live through the pauses: "€", written in two
	// halves, arrived whole in a text event.
	sawEuro := false
	for _, ev := range rest.events {
		sawEuro = sawEuro || string(ev.Data) == `"€"`
	}
	if !sawEuro {
		t.Errorf("no text event \"€\" after the pause")
	}

	// One stream from the start: text chunks are JSON strings, and chunks
	// that are not UTF-8 are base64.
	whole := s.followToExit(t, j.ID, "", [2]int64{})
	if whole.out.String() != wantOut || whole.err.String() != wantErr {
		t.Fatalf("SSE from the start differs from the output")
	}
	var sawText, sawBase64 bool
	for _, ev := range whole.events {
		switch {
		case ev.Name == "exit":
		case ev.Data[0] == '"':
			sawText = true
			var s string
			if err := json.Unmarshal(ev.Data, &s); err != nil {
				t.Fatalf("text event %.60q is not a JSON string: %v", ev.Data, err)
			}
		case bytes.HasPrefix(ev.Data, []byte(`{"base64":"`)):
			sawBase64 = true
		default:
			t.Fatalf("event data %.60q is neither a JSON string nor {\"base64\": …}", ev.Data)
		}
	}
	if !sawText || !sawBase64 {
		t.Errorf("saw text %v, base64 %v; want both", sawText, sawBase64)
	}

	// Every id is a pair of raw offsets: the raw route from there gives
	// the rest of each stream.
	mid := whole.events[len(whole.events)/2].ID
	a, b, _ = strings.Cut(mid, ".")
	for _, tc := range []struct {
		stream, off, want string
	}{{"stdout", a, wantOut}, {"stderr", b, wantErr}} {
		resp := s.Do(t, "GET", "/jobs/"+j.ID+"/output?stream="+tc.stream+"&offset="+tc.off, nil)
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		off, _ := strconv.Atoi(tc.off)
		if !bytes.Equal(got, []byte(tc.want[off:])) {
			t.Errorf("raw %s from offset %d (event id %s): %d bytes differ from the stream's rest", tc.stream, off, mid, len(got))
		}
	}
}

// TestSSEFinishedReconnect: a reconnect with the exit event's id of a
// finished job gets 204, which stops standard SSE clients; a reconnect
// with the last output event's id gets only the exit event it missed.
func TestSSEFinishedReconnect(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	var j job
	if st := s.DoJSON(t, "POST", "/exec", map[string]any{"command": "echo out; echo err >&2", "background": true}, &j); st != 202 {
		t.Fatalf("exec = %d", st)
	}
	s.waitJob(t, j.ID)
	d := s.followToExit(t, j.ID, "", [2]int64{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	resp := s.openEvents(t, ctx, j.ID, d.exit.ID)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent || len(body) != 0 {
		t.Errorf("reconnect with the exit id %q = %d %q, want 204 and no body", d.exit.ID, resp.StatusCode, body)
	}

	last := d.events[len(d.events)-2] // the last output event
	rest := s.followToExit(t, j.ID, last.ID, [2]int64{4, 4})
	if len(rest.events) != 1 || rest.exit.ID != d.exit.ID {
		t.Errorf("reconnect after the last output event got %d events (exit id %q), want only the exit event %q", len(rest.events), rest.exit.ID, d.exit.ID)
	}
}

// TestOutputClientLeaves: clients that leave an event stream or a raw
// download half way are not server errors, and nothing tries to write a
// status after the response began.
func TestOutputClientLeaves(t *testing.T) {
	t.Parallel()
	s := startServer(t, withConfig("jobs:\n  spoolMaxBytes: 268435456\n"))
	var j job
	if st := s.DoJSON(t, "POST", "/exec", map[string]any{"command": yesCommand(200 << 20), "background": true}, &j); st != 202 {
		t.Fatalf("exec = %d", st)
	}
	leave := func(path string) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, "GET", s.URL+path, nil)
		req.Header.Set("Authorization", "Bearer "+s.Token)
		// A connection of its own, closed with the body.
		cl := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
		resp, err := cl.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(resp.Body, make([]byte, 1<<20)); err != nil {
			t.Fatalf("read %s: %v", path, err)
		}
		resp.Body.Close()
	}
	const rounds = 4
	for range rounds {
		leave("/jobs/" + j.ID + "/output")
	}
	s.waitJob(t, j.ID)
	for range rounds {
		leave("/jobs/" + j.ID + "/output?stream=stdout&offset=0")
	}
	// Wait until the server has finished every one of those requests.
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp := s.Do(t, "GET", "/metrics", nil)
		m, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var done int
		for _, line := range strings.Split(string(m), "\n") {
			if strings.HasPrefix(line, "dshd_http_requests_total{") && strings.Contains(line, `route="/jobs/{id}/output"`) {
				n, _ := strconv.Atoi(line[strings.LastIndexByte(line, ' ')+1:])
				done += n
			}
		}
		if done >= 2*rounds {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the server finished %d of %d output requests within 20s", done, 2*rounds)
		}
		time.Sleep(50 * time.Millisecond)
	}
	logs := s.stderr.String()
	if strings.Contains(logs, "level=ERROR") || strings.Contains(logs, "superfluous") {
		t.Errorf("clients leaving were logged as errors:\n%s", logs)
	}
}
