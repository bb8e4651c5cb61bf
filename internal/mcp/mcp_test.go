package mcp

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/dshd/dshd/internal/agents"
	"github.com/dshd/dshd/internal/exec"
	"github.com/dshd/dshd/internal/run"
	"github.com/dshd/dshd/internal/shellenv"
)

// world is the endpoint over the real pipeline, served on loopback.
type world struct {
	h      *Handler
	url    string
	jobs   *exec.Executor
	agents *agents.Store
	svc    *run.Service

	mu   sync.Mutex
	errs []error // what ServeMCP returned
}

// newWorld serves o over a fresh pipeline; setup may change the
// executor's and the pipeline's options before they are built.
func newWorld(tb testing.TB, o Options, setup ...func(*exec.Options, *run.Options)) *world {
	tb.Helper()
	home := tb.TempDir()
	reg, err := shellenv.New(shellenv.Options{Home: home, StatePath: filepath.Join(home, "contributors.json")})
	if err != nil {
		tb.Fatal(err)
	}
	eo := exec.Options{
		Home:           home,
		Environ:        os.Environ(),
		DefaultCwd:     tb.TempDir(),
		DefaultTimeout: 30 * time.Second,
		MaxTimeout:     time.Minute,
		Grace:          200 * time.Millisecond,
	}
	var ro run.Options
	for _, f := range setup {
		f(&eo, &ro)
	}
	jobs, err := exec.New(eo)
	if err != nil {
		tb.Fatal(err)
	}
	store, err := agents.Open(context.Background(), agents.Options{Dir: filepath.Join(home, "sessions"), DefaultCwd: tb.TempDir()})
	if err != nil {
		tb.Fatal(err)
	}
	w := &world{jobs: jobs, agents: store}
	ro.Env, ro.Jobs, ro.Agents, ro.Home = reg, jobs, store, home
	w.svc = run.New(ro)
	o.Pipeline, o.Jobs = w.svc, jobs
	h := New(o)
	w.h = h
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if err := h.ServeMCP(rw, r); err != nil {
			w.mu.Lock()
			w.errs = append(w.errs, err)
			w.mu.Unlock()
			http.Error(rw, err.Error(), http.StatusBadRequest)
		}
	}))
	w.url = srv.URL
	tb.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := jobs.Close(ctx); err != nil {
			tb.Errorf("close executor: %v", err)
		}
		if err := store.Close(); err != nil {
			tb.Errorf("close store: %v", err)
		}
	})
	return w
}

func (w *world) served() []error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]error(nil), w.errs...)
}

// headerTransport adds headers to every request.
type headerTransport map[string]string

func (h headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, v := range h {
		r.Header.Set(k, v)
	}
	return http.DefaultTransport.RoundTrip(r)
}

// connect opens a session with the official Go client at the given
// protocol version ("" = the client's latest, which probes first).
func (w *world) connect(tb testing.TB, query, version string, header map[string]string, copts *sdk.ClientOptions) (*sdk.ClientSession, string) {
	tb.Helper()
	var agentID string
	hc := &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		resp, err := headerTransport(header).RoundTrip(r)
		if err == nil && resp.Header.Get(AgentHeader) != "" {
			agentID = resp.Header.Get(AgentHeader)
		}
		return resp, err
	})}
	c := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, copts)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, err := c.Connect(ctx, &sdk.StreamableClientTransport{Endpoint: w.url + query, HTTPClient: hc, DisableStandaloneSSE: true},
		&sdk.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		tb.Fatalf("connect %s: %v", query, err)
	}
	tb.Cleanup(func() { cs.Close() })
	return cs, agentID
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func text(tb testing.TB, res *sdk.CallToolResult) string {
	tb.Helper()
	var b strings.Builder
	for _, c := range res.Content {
		tc, ok := c.(*sdk.TextContent)
		if !ok {
			tb.Fatalf("content %T, want text", c)
		}
		b.WriteString(tc.Text)
	}
	return b.String()
}

func bash(tb testing.TB, cs *sdk.ClientSession, command string) *sdk.CallToolResult {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "bash", Arguments: map[string]any{"command": command}})
	if err != nil {
		tb.Fatal(err)
	}
	return res
}

func TestBinding(t *testing.T) {
	w := newWorld(t, Options{})
	named, err := w.agents.Create(context.Background(), t.TempDir(), agents.Bounds{})
	if err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name    string
		query   string
		version string
		header  map[string]string
		want    string // "" = a new agent
	}{
		{name: "new agent", version: "2025-11-25"},
		{name: "new agent, client's latest protocol", version: ""},
		{name: "named by header", version: "2025-06-18", header: map[string]string{AgentHeader: named.ID}, want: named.ID},
		{name: "named by query", version: "2025-03-26", query: "?" + AgentQuery + "=" + named.ID, want: named.ID},
		{name: "named by both alike", version: "2025-11-25", query: "?" + AgentQuery + "=" + named.ID, header: map[string]string{AgentHeader: named.ID}, want: named.ID},
	}
	seen := map[string]bool{}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cs, bound := w.connect(t, tt.query, tt.version, tt.header, nil)
			if tt.want != "" && bound != tt.want {
				t.Errorf("bound to %q, want %s", bound, tt.want)
			}
			if tt.want == "" {
				if a, err := w.agents.Get(context.Background(), bound); err != nil || a.ParentID != "" {
					t.Errorf("bound to %q (%+v, %v), want a new root agent", bound, a, err)
				}
				if seen[bound] {
					t.Errorf("agent %s bound twice", bound)
				}
				seen[bound] = true
			}
			if got := text(t, bash(t, cs, "echo $DSH_SESSION_ID")); got != bound {
				t.Errorf("DSH_SESSION_ID = %q, want %s", got, bound)
			}
		})
	}
	if errs := w.served(); len(errs) != 0 {
		t.Errorf("ServeMCP errors: %v", errs)
	}
}

func TestBindingRefused(t *testing.T) {
	w := newWorld(t, Options{})
	c := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, nil)
	for _, tc := range []struct {
		query, header string
		want          error
	}{
		{query: "?" + AgentQuery + "=agt_missing", want: agents.ErrNotFound},
		{header: "agt_missing", want: agents.ErrNotFound},
		{query: "?" + AgentQuery + "=agt_a", header: "agt_b", want: ErrAgentConflict},
	} {
		before, err := w.agents.List(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		hc := &http.Client{Transport: headerTransport{AgentHeader: tc.header}}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err = c.Connect(ctx, &sdk.StreamableClientTransport{Endpoint: w.url + tc.query, HTTPClient: hc, MaxRetries: -1},
			&sdk.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
		cancel()
		if err == nil {
			t.Errorf("%s %s: connected, want refused", tc.query, tc.header)
		}
		errs := w.served()
		if len(errs) == 0 || !errors.Is(errs[len(errs)-1], tc.want) {
			t.Errorf("%s %s: ServeMCP errors %v, want %v last", tc.query, tc.header, errs, tc.want)
		}
		after, err := w.agents.List(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if len(after) != len(before) {
			t.Errorf("%s %s: a refused binding created an agent", tc.query, tc.header)
		}
	}
}

// TestProgress checks that progress notifications carry the output in
// order, whole runes only, with growing progress, at most ProgressBytes of
// a stream each.
func TestProgress(t *testing.T) {
	w := newWorld(t, Options{ProgressBytes: 5, ProgressInterval: time.Millisecond})
	var (
		mu    sync.Mutex
		notes []*sdk.ProgressNotificationParams
	)
	cs, _ := w.connect(t, "", "2025-11-25", nil, &sdk.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, r *sdk.ProgressNotificationClientRequest) {
			mu.Lock()
			notes = append(notes, r.Params)
			mu.Unlock()
		},
	})
	// Multi-byte runes, written one byte at a time with pauses, so that
	// reads see split runes; then a pause for everything to be sent.
	want := "héé\nünï\nçöð€"
	var command strings.Builder
	for _, b := range []byte(want + "\n") {
		fmt.Fprintf(&command, `printf '\%03o'; sleep 0.02; `, b)
	}
	command.WriteString("sleep 0.5")
	params := &sdk.CallToolParams{Name: "bash", Arguments: map[string]any{"command": command.String()}}
	params.SetProgressToken("tok")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	if got := text(t, res); got != want {
		t.Fatalf("result = %q, want %q", got, want)
	}
	mu.Lock()
	defer mu.Unlock()
	var streamed strings.Builder
	last := 0.0
	for _, n := range notes {
		if n.ProgressToken != "tok" || n.Progress <= last || !utf8.ValidString(n.Message) || strings.ContainsRune(n.Message, utf8.RuneError) {
			t.Errorf("notification %+v after progress %v", n, last)
		}
		if len(n.Message) > 5 {
			t.Errorf("message %q is over ProgressBytes", n.Message)
		}
		last = n.Progress
		streamed.WriteString(n.Message)
	}
	if streamed.String() != want+"\n" {
		t.Errorf("streamed %q, want %q", streamed.String(), want+"\n")
	}
	if last != float64(len(want)+1) {
		t.Errorf("last progress = %v, want %d bytes", last, len(want)+1)
	}
}

// TestCancel checks that a cancelled call stops its job, whose end is
// still recorded as the call's result.
func TestCancel(t *testing.T) {
	w := newWorld(t, Options{})
	// The first progress notification shows the call is waiting for its
	// job; cancelling earlier would race the job's start.
	first := make(chan struct{})
	var once sync.Once
	cs, agentID := w.connect(t, "", "2025-11-25", nil, &sdk.ClientOptions{
		ProgressNotificationHandler: func(context.Context, *sdk.ProgressNotificationClientRequest) { once.Do(func() { close(first) }) },
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		params := &sdk.CallToolParams{Name: "bash", Arguments: map[string]any{"command": "echo started; sleep 300"}}
		params.SetProgressToken(1)
		_, err := cs.CallTool(ctx, params)
		done <- err
	}()
	select {
	case <-first:
	case err := <-done:
		t.Fatalf("call ended before any progress: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("no progress within 10s")
	}
	js := w.jobs.Jobs(agentID, exec.StateRunning)
	if len(js) != 1 {
		t.Fatalf("running jobs = %+v, want the call's", js)
	}
	job := js[0]
	deadline := time.Now().Add(10 * time.Second)
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("CallTool = %v, want cancelled", err)
	}
	j, err := w.jobs.Job(job.ID)
	if err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer wcancel()
	if snap, err := j.Wait(wctx); err != nil || snap.State != exec.StateCancelled {
		t.Fatalf("job = %s, %v, want cancelled", snap.State, err)
	}
	// The result is recorded once the job has ended.
	var last agents.Event
	for time.Now().Before(deadline) {
		events, err := w.agents.Events(context.Background(), agentID)
		if err != nil {
			t.Fatal(err)
		}
		if last = events[len(events)-1]; last.Type == agents.EventToolResult {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if last.Type != agents.EventToolResult || !strings.Contains(string(last.Data), "killed by signal") {
		t.Errorf("last event = %s %s, want the stopped job's result", last.Type, last.Data)
	}
}

func TestCompleteRunes(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int
	}{
		{"", 0},
		{"abc", 3},
		{"é", 2},
		{"a\xc3", 1},
		{"a\xe2\x82", 1},
		{"€", 3},
		{"\xf0\x9f\x98", 0},
		{"😀", 4},
		{"\xff", 1}, // invalid, not incomplete: passed on (and replaced)
	} {
		if got := completeRunes([]byte(tc.in)); got != tc.want {
			t.Errorf("completeRunes(%q) = %d, want %d", tc.in, got, tc.want)
		}
	}
}

// TestArgumentErrorsAreRecordedResults: arguments the model got wrong come
// back as an error result saying what is wrong, and the transcript has the
// call and that result, as over HTTP.
func TestArgumentErrorsAreRecordedResults(t *testing.T) {
	w := newWorld(t, Options{})
	cs, agentID := w.connect(t, "", "2025-11-25", nil, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, args := range []map[string]any{
		{"command": ""},
		{"command": "true", "timeout": "30s"},
	} {
		res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "bash", Arguments: args})
		if err != nil {
			t.Fatalf("CallTool(%v): %v, want an error result", args, err)
		}
		if got := text(t, res); !res.IsError || !strings.Contains(got, "command must not be empty") && !strings.Contains(got, "timeout must be a non-negative integer") {
			t.Errorf("CallTool(%v) = %v %q, want an error result naming the problem", args, res.IsError, got)
		}
	}
	evs, err := w.agents.Events(ctx, agentID)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range evs {
		if e.Type == agents.EventToolCall || e.Type == agents.EventToolResult {
			got = append(got, e.Type+" "+string(e.Data))
		}
	}
	if len(got) != 4 || !strings.Contains(got[0], `"arguments":{"command":""}`) || !strings.Contains(got[1], `"isError":true`) ||
		!strings.Contains(got[2], `"timeout":"30s"`) || !strings.Contains(got[3], "timeout must be") {
		t.Errorf("transcript events:\n%s\nwant each call and its error result", strings.Join(got, "\n"))
	}
}
