package agents

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/dshd/dshd/internal/golden"
	"github.com/dshd/dshd/internal/limits"
)

// fakeClock returns a fixed start time advanced by one second per call.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{t: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := c.t
	c.t = c.t.Add(time.Second)
	return t
}

// seqIDs returns deterministic agent ids agt_0001, agt_0002, ….
func seqIDs() func() string {
	var mu sync.Mutex
	n := 0
	return func() string {
		mu.Lock()
		defer mu.Unlock()
		n++
		return fmt.Sprintf("agt_%04d", n)
	}
}

// mustOpen opens a store in opts.Dir (a fresh temp dir when empty).
func mustOpen(tb testing.TB, opts Options) *Store {
	tb.Helper()
	if opts.Dir == "" {
		opts.Dir = filepath.Join(tb.TempDir(), "sessions")
	}
	s, err := Open(context.Background(), opts)
	if err != nil {
		tb.Fatalf("Open: %v", err)
	}
	tb.Cleanup(func() { _ = s.Close() })
	return s
}

func mustCreate(tb testing.TB, s *Store, cwd string) Agent {
	tb.Helper()
	a, err := s.Create(context.Background(), cwd, Bounds{})
	if err != nil {
		tb.Fatalf("Create(%q): %v", cwd, err)
	}
	return a
}

func mustAppend(tb testing.TB, s *Store, id, typ string, data any) Event {
	tb.Helper()
	ev, err := s.Append(context.Background(), id, typ, data)
	if err != nil {
		tb.Fatalf("Append(%s, %s): %v", id, typ, err)
	}
	return ev
}

// checkJSONL fails unless every line of the file is a JSON object and the
// file ends with a newline.
func checkJSONL(tb testing.TB, path string) []map[string]any {
	tb.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	if len(data) == 0 || data[len(data)-1] != '\n' {
		tb.Fatalf("%s does not end with a newline: %q", path, data)
	}
	var out []map[string]any
	for i, line := range strings.Split(strings.TrimSuffix(string(data), "\n"), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			tb.Fatalf("%s line %d is not JSON: %v: %q", path, i+1, err, line)
		}
		out = append(out, m)
	}
	return out
}

func seqs(tb testing.TB, s *Store, id string) []int64 {
	tb.Helper()
	evs, err := s.Events(context.Background(), id)
	if err != nil {
		tb.Fatal(err)
	}
	out := []int64{}
	for _, ev := range evs {
		out = append(out, ev.Seq)
	}
	return out
}

func TestCreateGetList(t *testing.T) {
	ctx := context.Background()
	def := t.TempDir()
	cwd := t.TempDir()
	file := filepath.Join(cwd, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	s := mustOpen(t, Options{DefaultCwd: def})

	a := mustCreate(t, s, "")
	b := mustCreate(t, s, cwd+"/./")
	if a.Cwd != def || b.Cwd != cwd {
		t.Errorf("cwds = %q, %q; want %q, %q", a.Cwd, b.Cwd, def, cwd)
	}
	if !strings.HasPrefix(a.ID, "agt_") || a.ID >= b.ID {
		t.Errorf("ids %q, %q: want agt_ prefix and increasing", a.ID, b.ID)
	}
	if a.Origin != OriginRoot || a.RootID != a.ID || a.ParentID != "" || a.Depth != 0 {
		t.Errorf("root agent = %+v", a)
	}

	got, err := s.Get(ctx, b.ID)
	if err != nil || got != b {
		t.Errorf("Get = %+v, %v; want %+v", got, err, b)
	}
	list, err := s.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]Agent{a, b}, list); diff != "" {
		t.Errorf("List (-want +got):\n%s", diff)
	}
	if _, err := s.Get(ctx, "agt_missing"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get(missing) err = %v, want ErrNotFound", err)
	}

	for name, cwd := range map[string]string{
		"relative":  "some/dir",
		"missing":   filepath.Join(cwd, "nope"),
		"not a dir": file,
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := s.Create(ctx, cwd, Bounds{}); !errors.Is(err, ErrInvalidCwd) {
				t.Errorf("Create(%q) err = %v, want ErrInvalidCwd", cwd, err)
			}
		})
	}
}

func TestCreateHeaderIsDurable(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "sessions")
	s := mustOpen(t, Options{Dir: dir, DefaultCwd: "/", Now: newFakeClock().Now, NewID: seqIDs()})
	var synced []string
	s.syncFile = func(f *os.File) error {
		// Record what was synced and what the file held at that moment.
		fi, err := f.Stat()
		if err != nil {
			return err
		}
		synced = append(synced, fmt.Sprintf("%s dir=%v size=%d", filepath.Base(f.Name()), fi.IsDir(), fi.Size()))
		return f.Sync()
	}
	a := mustCreate(t, s, "")

	want := `{"type":"session","version":1,"id":"agt_0001","createdAt":"2025-01-02T03:04:05Z","cwd":"/","parentId":null,"origin":"root","depth":0}` + "\n"
	data, err := os.ReadFile(s.Path(a.ID))
	if err != nil {
		t.Fatal(err)
	}
	if string(data) != want {
		t.Errorf("header on disk:\n got %s\nwant %s", data, want)
	}
	// The temporary file is ".agt_0001.jsonl.<random>.tmp" (atomicfile.TempPattern).
	tmpFile := regexp.MustCompile(`^\.agt_0001\.jsonl\.[0-9]+\.tmp dir=false size=` + strconv.Itoa(len(want)) + `$`)
	if len(synced) != 2 || !tmpFile.MatchString(synced[0]) || !strings.HasPrefix(synced[1], "sessions dir=true size=") {
		t.Errorf("synced = %q, want the file with its header, then the directory", synced)
	}
	for path, mode := range map[string]fs.FileMode{s.Path(a.ID): 0o600, dir: 0o700 | fs.ModeDir} {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode() != mode {
			t.Errorf("mode of %s = %v, want %v", path, fi.Mode(), mode)
		}
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("directory holds %d entries, want only the transcript", len(entries))
	}

	// A failing fsync fails Create and leaves nothing behind.
	s.syncFile = func(*os.File) error { return errors.New("disk on fire") }
	if _, err := s.Create(context.Background(), "", Bounds{}); err == nil {
		t.Fatal("Create with failing fsync succeeded")
	}
	entries, _ = os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("after failed Create the directory holds %d entries, want 1", len(entries))
	}
	if list, _ := s.List(context.Background()); len(list) != 1 {
		t.Errorf("after failed Create List has %d agents, want 1", len(list))
	}
}

func TestResumeAcrossRestart(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "sessions")
	s1, err := Open(ctx, Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	root := mustCreate(t, s1, t.TempDir())
	mustAppend(t, s1, root.ID, EventToolCall, map[string]any{"callId": "c1"})
	mustAppend(t, s1, root.ID, EventToolResult, map[string]any{"callId": "c1"})
	// Bounds are recorded in the header and come back after a restart.
	child, err := s1.Spawn(ctx, root.ID, Bounds{Limits: limits.Limits{Pids: 32, MemoryBytes: 64 << 20, CPU: 0.5}})
	if err != nil {
		t.Fatal(err)
	}
	grandchild, err := s1.Fork(ctx, child.ID, nil, Bounds{Limits: limits.Limits{Pids: 16, MemoryBytes: 64 << 20, CPU: 0.5}})
	if err != nil {
		t.Fatal(err)
	}
	if err := s1.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s1.Append(ctx, root.ID, EventToolCall, nil); !errors.Is(err, ErrClosed) {
		t.Errorf("Append after Close err = %v, want ErrClosed", err)
	}

	s2 := mustOpen(t, Options{Dir: dir})
	list, err := s2.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]Agent{root, child, grandchild}, list); diff != "" {
		t.Errorf("agents after restart (-want +got):\n%s", diff)
	}
	if grandchild.RootID != root.ID {
		t.Errorf("fork of spawn RootID = %s, want %s", grandchild.RootID, root.ID)
	}

	got, err := s2.Resume(ctx, root.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got != root {
		t.Errorf("Resume = %+v, want %+v", got, root)
	}
	evs, err := s2.Events(ctx, root.ID)
	if err != nil {
		t.Fatal(err)
	}
	last := evs[len(evs)-1]
	if len(evs) != 3 || last.Type != EventSessionResume || last.Seq != 3 || string(last.Data) != "{}" {
		t.Errorf("events after resume = %+v; want seq 3 session/resume with {}", evs)
	}
	if _, err := s2.Resume(ctx, "agt_unknown"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Resume(unknown) err = %v, want ErrNotFound", err)
	}
	if _, err := s2.Resume(ctx, "../etc/passwd"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Resume(path) err = %v, want ErrNotFound", err)
	}

	// A transcript that appears after Open is found by Resume.
	s3 := mustOpen(t, Options{Dir: filepath.Join(t.TempDir(), "other")})
	late := mustCreate(t, s3, "")
	data, err := os.ReadFile(s3.Path(late.ID))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(s2.Path(late.ID), data, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := s2.Get(ctx, late.ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get(late) before Resume err = %v, want ErrNotFound", err)
	}
	if got, err := s2.Resume(ctx, late.ID); err != nil || got != late {
		t.Errorf("Resume(late) = %+v, %v; want %+v", got, err, late)
	}
}

func TestFork(t *testing.T) {
	ctx := context.Background()
	s := mustOpen(t, Options{DefaultCwd: "/"})
	parent := mustCreate(t, s, "")
	spawned, err := s.Spawn(ctx, parent.ID, Bounds{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		mustAppend(t, s, spawned.ID, EventToolCall, map[string]int{"i": i})
	}
	parentLines := strings.SplitAfter(string(mustTranscript(t, s, spawned.ID)), "\n")

	ptr := func(n int64) *int64 { return &n }
	tests := []struct {
		name     string
		boundary *int64
		want     []int64
		err      error
	}{
		{"whole transcript", nil, []int64{1, 2, 3}, nil},
		{"boundary zero", ptr(0), []int64{}, nil},
		{"boundary inside", ptr(2), []int64{1, 2}, nil},
		{"boundary at last", ptr(3), []int64{1, 2, 3}, nil},
		{"negative", ptr(-1), nil, ErrInvalidBoundary},
		{"beyond last", ptr(4), nil, ErrInvalidBoundary},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := s.Fork(ctx, spawned.ID, tt.boundary, Bounds{})
			if !errors.Is(err, tt.err) {
				t.Fatalf("Fork err = %v, want %v", err, tt.err)
			}
			if tt.err != nil {
				return
			}
			want := Agent{ID: f.ID, ParentID: spawned.ID, RootID: parent.ID, Cwd: "/",
				Origin: OriginFork, Depth: spawned.Depth, CreatedAt: f.CreatedAt}
			if f != want || f.ID == spawned.ID {
				t.Errorf("fork = %+v, want %+v", f, want)
			}
			if diff := cmp.Diff(tt.want, seqs(t, s, f.ID)); diff != "" {
				t.Errorf("fork seqs (-want +got):\n%s", diff)
			}
			// Copied events are byte-identical to the parent's lines.
			forkLines := strings.SplitAfter(string(mustTranscript(t, s, f.ID)), "\n")
			for i := 1; i < len(forkLines)-1; i++ {
				if forkLines[i] != parentLines[i] {
					t.Errorf("fork line %d = %q, want %q", i, forkLines[i], parentLines[i])
				}
			}
			next := mustAppend(t, s, f.ID, EventToolResult, nil)
			if wantSeq := int64(len(tt.want)) + 1; next.Seq != wantSeq {
				t.Errorf("first append to fork has seq %d, want %d", next.Seq, wantSeq)
			}
			checkJSONL(t, s.Path(f.ID))
		})
	}
	if _, err := s.Fork(ctx, "agt_nobody", nil, Bounds{}); !errors.Is(err, ErrNotFound) {
		t.Errorf("Fork(unknown) err = %v, want ErrNotFound", err)
	}
	// The parent is untouched.
	if diff := cmp.Diff([]int64{1, 2, 3}, seqs(t, s, spawned.ID)); diff != "" {
		t.Errorf("parent seqs changed (-want +got):\n%s", diff)
	}
}

func mustTranscript(tb testing.TB, s *Store, id string) []byte {
	tb.Helper()
	data, err := s.Transcript(context.Background(), id)
	if err != nil {
		tb.Fatal(err)
	}
	return data
}

func TestSpawnDepthLimit(t *testing.T) {
	ctx := context.Background()
	for _, max := range []int{0, 1, 3} {
		t.Run(fmt.Sprintf("MaxDepth=%d", max), func(t *testing.T) {
			s := mustOpen(t, Options{DefaultCwd: "/", MaxDepth: max})
			limit := max
			if limit == 0 {
				limit = DefaultMaxDepth
			}
			root := mustCreate(t, s, "")
			cur := root
			for depth := 1; depth <= limit; depth++ {
				next, err := s.Spawn(ctx, cur.ID, Bounds{})
				if err != nil {
					t.Fatalf("Spawn to depth %d: %v", depth, err)
				}
				if next.Depth != depth || next.ParentID != cur.ID || next.RootID != root.ID || next.Origin != OriginSpawn {
					t.Fatalf("spawned = %+v", next)
				}
				if evs, _ := s.Events(ctx, next.ID); len(evs) != 0 {
					t.Errorf("spawned transcript has %d events, want none", len(evs))
				}
				cur = next
			}
			if _, err := s.Spawn(ctx, cur.ID, Bounds{}); !errors.Is(err, ErrDepthExceeded) {
				t.Errorf("Spawn past depth %d err = %v, want ErrDepthExceeded", limit, err)
			}
			// A fork keeps its parent's depth, so it is allowed at the limit.
			f, err := s.Fork(ctx, cur.ID, nil, Bounds{})
			if err != nil || f.Depth != limit {
				t.Errorf("Fork at max depth = %+v, %v; want depth %d", f, err, limit)
			}
		})
	}
	s := mustOpen(t, Options{DefaultCwd: "/"})
	if _, err := s.Spawn(ctx, "agt_nobody", Bounds{}); !errors.Is(err, ErrNotFound) {
		t.Errorf("Spawn(unknown) err = %v, want ErrNotFound", err)
	}
}

func TestConcurrentAppends(t *testing.T) {
	ctx := context.Background()
	s := mustOpen(t, Options{DefaultCwd: "/"})
	a := mustCreate(t, s, "")
	b := mustCreate(t, s, "")
	const writers, each = 8, 50
	var wg sync.WaitGroup
	for w := range writers {
		for _, id := range []string{a.ID, b.ID} {
			wg.Go(func() {
				for i := range each {
					// Include a newline and non-ASCII text to prove each event stays one line.
					data := map[string]any{"w": w, "i": i, "text": "line\nbreak ✓"}
					if _, err := s.Append(ctx, id, EventToolCall, data); err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
	}
	wg.Wait()
	for _, id := range []string{a.ID, b.ID} {
		lines := checkJSONL(t, s.Path(id))
		if len(lines) != writers*each+1 {
			t.Fatalf("%s has %d lines, want %d", id, len(lines), writers*each+1)
		}
		for i, m := range lines[1:] {
			if seq := m["seq"].(float64); int(seq) != i+1 {
				t.Fatalf("%s line %d has seq %v, want %d", id, i+2, seq, i+1)
			}
		}
	}
}

func TestAppendValidation(t *testing.T) {
	ctx := context.Background()
	s := mustOpen(t, Options{DefaultCwd: "/"})
	a := mustCreate(t, s, "")
	tests := []struct {
		name, id, typ string
		data          any
		err           error
	}{
		{"blank type", a.ID, " ", nil, ErrInvalidEvent},
		{"unencodable data", a.ID, EventToolCall, make(chan int), ErrInvalidEvent},
		{"invalid raw json", a.ID, EventToolCall, json.RawMessage(`{"a":`), ErrInvalidEvent},
		{"unknown agent", "agt_nobody", EventToolCall, nil, ErrNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := s.Append(ctx, tt.id, tt.typ, tt.data); !errors.Is(err, tt.err) {
				t.Errorf("Append err = %v, want %v", err, tt.err)
			}
		})
	}
	ev := mustAppend(t, s, a.ID, "custom/type", nil)
	if ev.Seq != 1 || string(ev.Data) != "{}" {
		t.Errorf("nil data event = %+v, want seq 1 and {}", ev)
	}
	ev = mustAppend(t, s, a.ID, EventToolResult, json.RawMessage("{\n \"a\" : 1\n}"))
	if ev.Seq != 2 || string(ev.Data) != `{"a":1}` {
		t.Errorf("raw data event = %+v, want seq 2 and compact data", ev)
	}
	checkJSONL(t, s.Path(a.ID))
}

// counterValue reads a counter from a registry.
func counterValue(tb testing.TB, reg *prometheus.Registry, name string) float64 {
	tb.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		tb.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			var sum float64
			for _, m := range mf.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
			return sum
		}
	}
	return 0
}

func TestTornLines(t *testing.T) {
	const hdr = `{"type":"session","version":1,"id":"agt_t","createdAt":"2025-01-02T03:04:05Z","cwd":"/","parentId":null,"origin":"root","depth":0}` + "\n"
	ev := func(seq int) string {
		return fmt.Sprintf(`{"type":"tool/call","seq":%d,"time":"2025-01-02T03:04:06Z","data":{}}`, seq)
	}
	tests := []struct {
		name     string
		content  string
		wantTorn float64
		wantSeqs []int64
		// wantFile is the file after Open's repair.
		wantFile string
	}{
		{
			name:     "partial last line",
			content:  hdr + ev(1) + "\n" + ev(2) + "\n" + `{"type":"tool/res`,
			wantTorn: 1, wantSeqs: []int64{1, 2},
			wantFile: hdr + ev(1) + "\n" + ev(2) + "\n",
		},
		{
			name:     "invalid terminated last line",
			content:  hdr + ev(1) + "\n" + "not json\n",
			wantTorn: 1, wantSeqs: []int64{1},
			wantFile: hdr + ev(1) + "\n",
		},
		{
			name:     "valid last line without newline",
			content:  hdr + ev(1) + "\n" + ev(2),
			wantTorn: 0, wantSeqs: []int64{1, 2},
			wantFile: hdr + ev(1) + "\n" + ev(2) + "\n",
		},
		{
			name:     "only header then torn",
			content:  hdr + `{"ty`,
			wantTorn: 1, wantSeqs: []int64{},
			wantFile: hdr,
		},
		{
			name:     "invalid middle line is skipped but kept",
			content:  hdr + ev(1) + "\n" + "{\"oops\":1}\n" + ev(2) + "\n",
			wantTorn: 1, wantSeqs: []int64{1, 2},
			wantFile: hdr + ev(1) + "\n" + "{\"oops\":1}\n" + ev(2) + "\n",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "agt_t.jsonl")
			if err := os.WriteFile(path, []byte(tt.content), 0o600); err != nil {
				t.Fatal(err)
			}
			var logs bytes.Buffer
			reg := prometheus.NewPedanticRegistry()
			s := mustOpen(t, Options{Dir: dir, Registerer: reg, Logger: slog.New(slog.NewTextHandler(&logs, nil))})

			if got := counterValue(t, reg, "dshd_transcript_torn_lines_total"); got != tt.wantTorn {
				t.Errorf("torn lines counter = %v, want %v", got, tt.wantTorn)
			}
			if tt.wantTorn > 0 && !strings.Contains(logs.String(), "torn transcript line") {
				t.Errorf("no torn-line warning logged; logs:\n%s", logs.String())
			}
			if got, _ := os.ReadFile(path); string(got) != tt.wantFile {
				t.Errorf("file after Open:\n got %q\nwant %q", got, tt.wantFile)
			}
			if diff := cmp.Diff(tt.wantSeqs, seqs(t, s, "agt_t")); diff != "" {
				t.Errorf("seqs (-want +got):\n%s", diff)
			}
			next := mustAppend(t, s, "agt_t", EventToolResult, map[string]bool{"ok": true})
			if want := int64(len(tt.wantSeqs)) + 1; next.Seq != want {
				t.Errorf("append after repair has seq %d, want %d", next.Seq, want)
			}
			lines := strings.Split(strings.TrimSuffix(string(mustTranscript(t, s, "agt_t")), "\n"), "\n")
			if last := lines[len(lines)-1]; !json.Valid([]byte(last)) {
				t.Errorf("last line after append is not JSON: %q", last)
			}
			if !strings.HasSuffix(string(mustTranscript(t, s, "agt_t")), "\n") {
				t.Error("transcript does not end with a newline")
			}
		})
	}
}

func TestInvalidFilesSkipped(t *testing.T) {
	dir := t.TempDir()
	good := mustCreate(t, mustOpen(t, Options{Dir: dir, DefaultCwd: "/"}), "")
	files := map[string]string{
		"agt_torn.jsonl":     `{"type":"session","version":1,"id":"agt_torn"`,
		"agt_garbage.jsonl":  "garbage\n",
		"agt_mismatch.jsonl": `{"type":"session","version":1,"id":"agt_other","createdAt":"2025-01-02T03:04:05Z","cwd":"/","parentId":null,"origin":"root","depth":0}` + "\n",
		"agt_version.jsonl":  `{"type":"session","version":9,"id":"agt_version","createdAt":"2025-01-02T03:04:05Z","cwd":"/","parentId":null,"origin":"root","depth":0}` + "\n",
		"agt_origin.jsonl":   `{"type":"session","version":1,"id":"agt_origin","createdAt":"2025-01-02T03:04:05Z","cwd":"/","parentId":null,"origin":"fork","depth":0}` + "\n",
		"agt_empty.jsonl":    "",
		"notes.txt":          "ignored",
		".agt_x.jsonl.tmp":   "interrupted create",
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	reg := prometheus.NewPedanticRegistry()
	var logs bytes.Buffer
	s := mustOpen(t, Options{Dir: dir, Registerer: reg, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	list, err := s.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0] != good {
		t.Errorf("List = %+v, want only %+v", list, good)
	}
	if got := counterValue(t, reg, "dshd_transcript_invalid_files_total"); got != 6 {
		t.Errorf("invalid files counter = %v, want 6", got)
	}
	if n := strings.Count(logs.String(), "invalid header"); n != 6 {
		t.Errorf("logged %d invalid-header warnings, want 6:\n%s", n, logs.String())
	}
	if _, err := os.Stat(filepath.Join(dir, ".agt_x.jsonl.tmp")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("leftover temporary file not removed: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "agt_garbage.jsonl")); err != nil {
		t.Errorf("invalid transcript was removed: %v", err)
	}
}

// TestMetricsRegisterTwice shows that reopening a store with the same
// registry reuses the registered collectors instead of panicking.
func TestMetricsRegisterTwice(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	dir := t.TempDir()
	mustCreate(t, mustOpen(t, Options{Dir: dir, DefaultCwd: "/", Registerer: reg}), "")
	mustCreate(t, mustOpen(t, Options{Dir: dir, DefaultCwd: "/", Registerer: reg}), "")
	if got := counterValue(t, reg, "dshd_agents_created_total"); got != 2 {
		t.Errorf("agents created counter = %v, want 2", got)
	}
}

func TestGoldenTranscripts(t *testing.T) {
	ctx := context.Background()
	s := mustOpen(t, Options{DefaultCwd: "/", Now: newFakeClock().Now, NewID: seqIDs()})
	root := mustCreate(t, s, "")
	mustAppend(t, s, root.ID, EventToolCall, map[string]any{
		"callId": "call_1", "name": "bash",
		"arguments": map[string]any{"command": "echo hi", "env": map[string]string{"X": "1"}},
		"ignored":   []string{"env"},
	})
	mustAppend(t, s, root.ID, EventHookInvoked, map[string]any{"callId": "call_1", "handler": "claude-code:PreToolUse[0].hooks[0]"})
	mustAppend(t, s, root.ID, EventHookResult, map[string]any{"callId": "call_1", "decision": "allow"})
	mustAppend(t, s, root.ID, EventToolResult, map[string]any{
		"callId": "call_1", "isError": false, "text": "hi\n", "jobId": "job_1", "exitCode": 0,
	})
	if _, err := s.Resume(ctx, root.ID); err != nil {
		t.Fatal(err)
	}
	boundary := int64(4)
	fork, err := s.Fork(ctx, root.ID, &boundary, Bounds{})
	if err != nil {
		t.Fatal(err)
	}
	mustAppend(t, s, fork.ID, EventToolCall, map[string]any{"callId": "call_2", "name": "job_list", "arguments": map[string]any{}})
	spawn, err := s.Spawn(ctx, fork.ID, Bounds{})
	if err != nil {
		t.Fatal(err)
	}
	for name, id := range map[string]string{"root": root.ID, "fork": fork.ID, "spawn": spawn.ID} {
		t.Run(name, func(t *testing.T) {
			golden.Compare(t, filepath.Join("testdata", name+".jsonl.golden"), mustTranscript(t, s, id))
		})
	}
}

func TestRootIDWithMissingAncestor(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s1 := mustOpen(t, Options{Dir: dir, DefaultCwd: "/"})
	root := mustCreate(t, s1, "")
	mid, err := s1.Spawn(ctx, root.ID, Bounds{})
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := s1.Spawn(ctx, mid.ID, Bounds{})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(s1.Path(mid.ID)); err != nil {
		t.Fatal(err)
	}
	s2 := mustOpen(t, Options{Dir: dir})
	got, err := s2.Get(ctx, leaf.ID)
	if err != nil {
		t.Fatal(err)
	}
	// The walk stops at the missing ancestor: it is the furthest id known.
	if got.RootID != mid.ID || got.ParentID != mid.ID {
		t.Errorf("leaf after its parent vanished = %+v, want RootID %s", got, mid.ID)
	}
	if got, _ := s2.Get(ctx, root.ID); got.RootID != root.ID {
		t.Errorf("root RootID = %s, want itself", got.RootID)
	}
}

func TestConcurrentCreates(t *testing.T) {
	ctx := context.Background()
	s := mustOpen(t, Options{DefaultCwd: "/"})
	root := mustCreate(t, s, "")
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			if _, err := s.Spawn(ctx, root.ID, Bounds{}); err != nil {
				t.Error(err)
			}
		})
		wg.Go(func() {
			if _, err := s.Append(ctx, root.ID, EventToolCall, nil); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	list, err := s.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 21 {
		t.Errorf("List has %d agents, want 21", len(list))
	}
	if got := seqs(t, s, root.ID); len(got) != 20 || got[19] != 20 {
		t.Errorf("root seqs = %v, want 1..20", got)
	}
}

func TestDuplicateIDRefused(t *testing.T) {
	s := mustOpen(t, Options{DefaultCwd: "/", NewID: func() string { return "agt_same" }})
	mustCreate(t, s, "")
	if _, err := s.Create(context.Background(), "", Bounds{}); err == nil {
		t.Error("second Create with a repeated id succeeded")
	}
	s2 := mustOpen(t, Options{DefaultCwd: "/", NewID: func() string { return "../escape" }})
	if _, err := s2.Create(context.Background(), "", Bounds{}); err == nil {
		t.Error("Create with a path-like id succeeded")
	}
}

// TestResumeDuringCreate: an id whose transcript is already renamed into
// place but not yet indexed by Create is not found by Resume, which would
// otherwise index a second entry for the same file and let two writers hand
// out the same seqs.
func TestResumeDuringCreate(t *testing.T) {
	ctx := context.Background()
	s := mustOpen(t, Options{DefaultCwd: "/", NewID: seqIDs()})
	var resumeErr error
	resumed := false
	s.syncFile = func(f *os.File) error {
		if fi, err := f.Stat(); err == nil && fi.IsDir() && !resumed {
			resumed = true // the file is in place; Create has not indexed it yet
			_, resumeErr = s.Resume(ctx, "agt_0001")
		}
		return f.Sync()
	}
	a := mustCreate(t, s, "")
	if !resumed {
		t.Fatal("directory fsync hook did not run")
	}
	if !errors.Is(resumeErr, ErrNotFound) {
		t.Errorf("Resume of an agent being created: err = %v, want ErrNotFound", resumeErr)
	}
	mustAppend(t, s, a.ID, EventToolCall, nil)
	mustAppend(t, s, a.ID, EventToolCall, nil)
	if _, err := s.Resume(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]int64{1, 2, 3}, seqs(t, s, a.ID)); diff != "" {
		t.Errorf("seqs (-want +got):\n%s", diff)
	}
}

func TestInterruptedToolCallsGetAResult(t *testing.T) {
	const hdr = `{"type":"session","version":1,"id":"agt_i","createdAt":"2025-01-02T03:04:05Z","cwd":"/","parentId":null,"origin":"root","depth":0}` + "\n"
	call := func(seq int, id string) string {
		return fmt.Sprintf(`{"type":"tool/call","seq":%d,"time":"2025-01-02T03:04:06Z","data":{"callId":%q,"name":"bash"}}`+"\n", seq, id)
	}
	result := func(seq int, id string) string {
		return fmt.Sprintf(`{"type":"tool/result","seq":%d,"time":"2025-01-02T03:04:07Z","data":{"callId":%q,"isError":false,"text":"ok"}}`+"\n", seq, id)
	}
	tests := []struct {
		name    string
		content string
		want    []string // call ids answered as interrupted, in order
	}{
		{"answered", hdr + call(1, "c1") + result(2, "c1"), nil},
		{"last call open", hdr + call(1, "c1") + result(2, "c1") + call(3, "c2"), []string{"c2"}},
		{"two open, one answered out of order", hdr + call(1, "a") + call(2, "b") + call(3, "c") + result(4, "b"), []string{"a", "c"}},
	}
	for _, tt := range tests {
		for _, via := range []string{"open", "resume"} {
			t.Run(tt.name+"/"+via, func(t *testing.T) {
				dir := t.TempDir()
				write := func() {
					if err := os.WriteFile(filepath.Join(dir, "agt_i.jsonl"), []byte(tt.content), 0o600); err != nil {
						t.Fatal(err)
					}
				}
				if via == "open" {
					write()
				}
				s := mustOpen(t, Options{Dir: dir})
				if via == "resume" {
					write() // appears after Open: Resume loads it
					if _, err := s.Resume(context.Background(), "agt_i"); err != nil {
						t.Fatal(err)
					}
				}
				evs, err := s.Events(context.Background(), "agt_i")
				if err != nil {
					t.Fatal(err)
				}
				var got []string
				for _, ev := range evs {
					var d struct {
						CallID      string `json:"callId"`
						IsError     bool   `json:"isError"`
						Text        string `json:"text"`
						Interrupted bool   `json:"interrupted"`
					}
					if ev.Type != EventToolResult || json.Unmarshal(ev.Data, &d) != nil || !d.Interrupted {
						continue
					}
					if !d.IsError || d.Text != InterruptedText {
						t.Errorf("interrupted result %s = %+v, want an error with InterruptedText", ev.Data, d)
					}
					got = append(got, d.CallID)
				}
				if diff := cmp.Diff(tt.want, got); diff != "" {
					t.Errorf("interrupted call ids (-want +got):\n%s", diff)
				}
				for i, ev := range evs {
					if ev.Seq != int64(i+1) {
						t.Fatalf("event %d has seq %d: seqs must stay contiguous", i, ev.Seq)
					}
				}
			})
		}
	}
}
