package shellenv

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// hookServer is a real webhook server on 127.0.0.1 that counts calls by
// path and records the last request body per path.
type hookServer struct {
	*httptest.Server
	mu    sync.Mutex
	calls map[string]int
	last  map[string][]byte
	// arrived counts requests to /barrier; each waits for barrierN of them.
	arrived  atomic.Int32
	barrierN int32
	barrier  chan struct{}
	once     sync.Once
	// slowIn counts requests to /slow in flight; slowMax is the most at once.
	slowIn, slowMax atomic.Int32
}

func newHookServer(tb testing.TB) *hookServer {
	tb.Helper()
	h := &hookServer{calls: map[string]int{}, last: map[string][]byte{}, barrierN: 2, barrier: make(chan struct{})}
	h.Server = httptest.NewServer(http.HandlerFunc(h.serve))
	tb.Cleanup(h.Close)
	return h
}

func (h *hookServer) serve(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	h.mu.Lock()
	h.calls[req.URL.Path]++
	h.last[req.URL.Path] = body
	h.mu.Unlock()

	var in struct{ Keys []string }
	_ = json.Unmarshal(body, &in)
	w.Header().Set("Content-Type", "application/json")
	switch req.URL.Path {
	case "/ok":
		out := map[string]string{}
		for _, k := range in.Keys {
			out[k] = "from " + k
		}
		_ = json.NewEncoder(w).Encode(out)
	case "/partial":
		_, _ = io.WriteString(w, `{}`)
	case "/undeclared":
		_, _ = io.WriteString(w, `{"DSH_NOT_MINE": "x"}`)
	case "/nonstring":
		_, _ = io.WriteString(w, `{"`+in.Keys[0]+`": 42}`)
	case "/null":
		_, _ = io.WriteString(w, `{"`+in.Keys[0]+`": null}`)
	case "/nul":
		_, _ = io.WriteString(w, `{"`+in.Keys[0]+`": "a\u0000b"}`)
	case "/array":
		_, _ = io.WriteString(w, `["x"]`)
	case "/status":
		http.Error(w, `{"error":"boom"}`, http.StatusInternalServerError)
	case "/badjson":
		_, _ = io.WriteString(w, `{"DSH_X": "unterminated`)
	case "/big":
		_, _ = io.WriteString(w, `{"`+in.Keys[0]+`": "`+strings.Repeat("x", MaxWebhookResponse)+`"}`)
	case "/slow":
		n := h.slowIn.Add(1)
		defer h.slowIn.Add(-1)
		for {
			if m := h.slowMax.Load(); n <= m || h.slowMax.CompareAndSwap(m, n) {
				break
			}
		}
		select {
		case <-req.Context().Done():
		case <-time.After(10 * time.Second):
		}
	case "/barrier":
		if h.arrived.Add(1) == h.barrierN {
			h.once.Do(func() { close(h.barrier) })
		}
		select {
		case <-h.barrier:
			_ = json.NewEncoder(w).Encode(map[string]string{in.Keys[0]: "together"})
		case <-req.Context().Done():
		case <-time.After(10 * time.Second):
		}
	default:
		http.NotFound(w, req)
	}
}

func (h *hookServer) count(path string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.calls[path]
}

func (h *hookServer) total() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, c := range h.calls {
		n += c
	}
	return n
}

func hookSpec(name, url string, keys ...string) Spec {
	s := Spec{Name: name, Resolver: ResolverSpec{Kind: KindWebhook, URL: url}}
	for _, k := range keys {
		s.Keys = append(s.Keys, KeySpec{Key: k, Description: "from a webhook"})
	}
	return s
}

func TestWebhookCalls(t *testing.T) {
	h := newHookServer(t)
	r, _ := mustNew(t, Options{})
	mustRegister(t, r, hookSpec("hook-a", h.URL+"/ok", "DSH_A_ONE", "DSH_A_TWO"))
	mustRegister(t, r, hookSpec("hook-b", h.URL+"/ok", "DSH_B"))
	mustRegister(t, r, hookSpec("hook-c", h.URL+"/partial", "DSH_C"))
	mustRegister(t, r, staticSpec("plain", "DSH_PLAIN", "p"))

	for range 20 {
		if n := len(r.Declarations()); n != 8 {
			t.Fatalf("Declarations() has %d keys, want 8", n)
		}
		r.Contributors()
		if _, err := r.Contributor("hook-a"); err != nil {
			t.Fatal(err)
		}
	}
	if n := h.total(); n != 0 {
		t.Fatalf("listing made %d webhook calls, want 0", n)
	}

	x := Execution{JobID: "job_1", Command: "echo hi", Cwd: "/w", Background: true,
		Agent: &Agent{ID: "agt_2", ParentID: "agt_1", Cwd: "/a", Depth: 1}}
	const collects = 5
	for i := 1; i <= collects; i++ {
		o := mustCollect(t, r, x)
		want := builtinOverlay("agt_2")
		want["DSH_A_ONE"] = "from DSH_A_ONE"
		want["DSH_A_TWO"] = "from DSH_A_TWO"
		want["DSH_B"] = "from DSH_B"
		want["DSH_PLAIN"] = "p"
		if diff := cmp.Diff(want, o.Map()); diff != "" {
			t.Fatalf("overlay (-want +got):\n%s", diff)
		}
		if got := h.count("/ok"); got != 2*i {
			t.Fatalf("after %d collects /ok has %d calls, want %d", i, got, 2*i)
		}
		if got := h.count("/partial"); got != i {
			t.Fatalf("after %d collects /partial has %d calls, want %d", i, got, i)
		}
	}

	var body map[string]any
	h.mu.Lock()
	err := json.Unmarshal(h.last["/partial"], &body)
	h.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	wantBody := map[string]any{
		"contributor": "hook-c",
		"keys":        []any{"DSH_C"},
		"execution": map[string]any{
			"jobId": "job_1", "command": "echo hi", "cwd": "/w", "background": true,
			"agent": map[string]any{"id": "agt_2", "parentId": "agt_1", "rootId": "agt_2", "cwd": "/a", "depth": float64(1)},
		},
	}
	if diff := cmp.Diff(wantBody, body); diff != "" {
		t.Errorf("webhook request body (-want +got):\n%s", diff)
	}
}

func TestWebhookNoAgent(t *testing.T) {
	h := newHookServer(t)
	r, _ := mustNew(t, Options{})
	mustRegister(t, r, hookSpec("hook", h.URL+"/partial", "DSH_X"))
	mustCollect(t, r, Execution{JobID: "job_1"})
	var body struct {
		Execution map[string]json.RawMessage
	}
	if err := json.Unmarshal(h.last["/partial"], &body); err != nil {
		t.Fatal(err)
	}
	if got := string(body.Execution["agent"]); got != "null" {
		t.Errorf("execution.agent = %s, want null", got)
	}
}

func TestWebhookFailures(t *testing.T) {
	h := newHookServer(t)
	tests := []struct {
		name       string
		path       string
		timeout    time.Duration // contributor timeout
		registry   time.Duration // registry deadline; zero: a generous one
		wantReason string        // substring
	}{
		{name: "undeclared key", path: "/undeclared", wantReason: `undeclared key "DSH_NOT_MINE"`},
		{name: "non-string value", path: "/nonstring", wantReason: "value of DSH_BAD is not a string"},
		{name: "null value", path: "/null", wantReason: "value of DSH_BAD is not a string"},
		{name: "NUL in value", path: "/nul", wantReason: "value of DSH_BAD contains a NUL byte"},
		{name: "not an object", path: "/array", wantReason: "invalid JSON response"},
		{name: "error status", path: "/status", wantReason: "500 Internal Server Error"},
		{name: "not found status", path: "/missing", wantReason: "404 Not Found"},
		{name: "invalid JSON", path: "/badjson", wantReason: "invalid JSON response"},
		{name: "body too large", path: "/big", wantReason: "response body exceeds"},
		{name: "registry timeout", path: "/slow", registry: 200 * time.Millisecond, wantReason: "timed out after 200ms"},
		{name: "contributor timeout", path: "/slow", timeout: 50 * time.Millisecond, wantReason: "timed out after 50ms"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Only the timeout cases race a short deadline: the others must
			// fail for their own reason even on a loaded machine, where
			// reading a body over 1 MiB can take longer than 200ms.
			deadline := tt.registry
			if deadline == 0 {
				deadline = 4 * time.Second
			}
			r, _ := mustNew(t, Options{WebhookTimeout: deadline})
			mustRegister(t, r, hookSpec("good", h.URL+"/ok", "DSH_GOOD"))
			mustRegister(t, r, staticSpec("plain", "DSH_PLAIN", "p"))
			bad := hookSpec("bad", h.URL+tt.path, "DSH_BAD")
			bad.Resolver.Timeout = tt.timeout
			mustRegister(t, r, bad)

			start := time.Now()
			o, err := r.Collect(context.Background(), Execution{JobID: "job_1"})
			if !errors.Is(err, ErrResolution) {
				t.Fatalf("Collect() error = %v, want ErrResolution", err)
			}
			if time.Since(start) > 5*time.Second {
				t.Errorf("Collect took %v", time.Since(start))
			}
			var re *ResolutionError
			if !errors.As(err, &re) {
				t.Fatalf("error %v is not a *ResolutionError", err)
			}
			if re.Contributor != "bad" {
				t.Errorf("Contributor = %q, want bad", re.Contributor)
			}
			if !strings.Contains(re.Reason, tt.wantReason) {
				t.Errorf("Reason = %q, want it to contain %q", re.Reason, tt.wantReason)
			}
			if o.Len() != 0 {
				t.Errorf("failed Collect returned an overlay of %d entries", o.Len())
			}
		})
	}
}

func TestWebhooksRunConcurrently(t *testing.T) {
	h := newHookServer(t)
	r, _ := mustNew(t, Options{WebhookTimeout: 5 * time.Second})
	// Each /barrier request answers only once both have arrived, so a
	// sequential Collect would time out.
	mustRegister(t, r, hookSpec("one", h.URL+"/barrier", "DSH_ONE"))
	mustRegister(t, r, hookSpec("two", h.URL+"/barrier", "DSH_TWO"))
	o := mustCollect(t, r, Execution{})
	want := builtinOverlay("")
	want["DSH_ONE"] = "together"
	want["DSH_TWO"] = "together"
	if diff := cmp.Diff(want, o.Map()); diff != "" {
		t.Errorf("overlay (-want +got):\n%s", diff)
	}
}

func TestWebhookOneDeadline(t *testing.T) {
	const deadline = 300 * time.Millisecond
	collect := func(n int) (time.Duration, *hookServer) {
		t.Helper()
		h := newHookServer(t)
		r, _ := mustNew(t, Options{WebhookTimeout: deadline})
		for i := range n {
			mustRegister(t, r, hookSpec(fmt.Sprintf("slow-%d", i), h.URL+"/slow", fmt.Sprintf("DSH_SLOW_%d", i)))
		}
		start := time.Now()
		_, err := r.Collect(context.Background(), Execution{})
		elapsed := time.Since(start)
		var re *ResolutionError
		if !errors.As(err, &re) || !strings.Contains(re.Reason, "timed out after 300ms") {
			t.Fatalf("Collect() with %d slow webhooks: error = %v, want a timeout", n, err)
		}
		return elapsed, h
	}
	// The baseline, in this run: one slow webhook under the deadline.
	one, _ := collect(1)
	four, h := collect(4)
	// All four were in flight at once, not one after another...
	if m := h.slowMax.Load(); m != 4 {
		t.Errorf("at most %d of four slow webhooks were in flight at once, want 4", m)
	}
	// ...under one deadline: four in turn would take at least four
	// deadlines, three more than the baseline's one, whatever the load.
	if four >= one+3*deadline {
		t.Errorf("Collect took %v with four slow webhooks; one took %v: four deadlines in turn, not one", four, one)
	}
}

func TestWebhookCallerCancel(t *testing.T) {
	h := newHookServer(t)
	r, _ := mustNew(t, Options{WebhookTimeout: 5 * time.Second})
	mustRegister(t, r, hookSpec("slow", h.URL+"/slow", "DSH_SLOW"))
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := r.Collect(ctx, Execution{})
	var re *ResolutionError
	if !errors.As(err, &re) || re.Contributor != "slow" || !strings.Contains(re.Reason, "cancelled") {
		t.Fatalf("Collect() error = %v, want a cancelled resolution of slow", err)
	}
}
