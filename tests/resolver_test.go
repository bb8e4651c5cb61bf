package tests

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
)

// TestWebhookResolution drives a real webhook contributor through the real
// server: listing never calls it, each execution calls it once, a failing
// webhook answers 502 naming the contributor and starts no process, and bad
// input is refused before the webhook is asked.
func TestWebhookResolution(t *testing.T) {
	t.Parallel()
	var calls atomic.Int64
	var fail atomic.Bool
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		var req struct {
			Execution struct {
				JobID string `json:"jobId"`
			} `json:"execution"`
		}
		_ = json.NewDecoder(r.Body).Decode(&req)
		if fail.Load() {
			http.Error(w, "ticket service down", http.StatusServiceUnavailable)
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]string{"DSH_TICKET": "T-" + req.Execution.JobID})
	}))
	defer hook.Close()

	s := startServer(t)
	if st := s.DoJSON(t, "POST", "/contributors", map[string]any{
		"name": "acme.ticket", "keys": []map[string]string{{"key": "DSH_TICKET", "description": "Ticket the agent works on."}},
		"resolver": map[string]any{"kind": "webhook", "url": hook.URL, "timeoutMs": 2000},
	}, nil); st != 201 {
		t.Fatalf("register = %d", st)
	}
	for range 5 {
		if st := s.DoJSON(t, "GET", "/env/declarations", nil, nil); st != 200 {
			t.Fatalf("declarations = %d", st)
		}
		s.DoJSON(t, "GET", "/contributors/acme.ticket", nil, nil)
	}
	if n := calls.Load(); n != 0 {
		t.Fatalf("listing called the webhook %d times, want 0", n)
	}

	var j job
	if st := s.DoJSON(t, "POST", "/exec", map[string]any{"command": `printf %s "$DSH_TICKET"`}, &j); st != 200 {
		t.Fatalf("exec = %d", st)
	}
	if want := "T-" + j.ID; j.Stdout.Text != want || calls.Load() != 1 {
		t.Errorf("child saw %q after %d calls, want %q after 1", j.Stdout.Text, calls.Load(), want)
	}

	if st := s.DoJSON(t, "POST", "/exec", map[string]any{"command": "true", "env": map[string]string{"DSH_TICKET": "forged"}}, nil); st != 400 {
		t.Errorf("managed env = %d, want 400", st)
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("a refused request called the webhook (%d calls, want 1)", n)
	}

	fail.Store(true)
	marker := filepath.Join(t.TempDir(), "ran")
	var p struct {
		Code, Contributor, Reason string
	}
	if st := s.DoJSON(t, "POST", "/exec", map[string]any{"command": "touch " + marker}, &p); st != 502 {
		t.Fatalf("exec with a failing webhook = %d, want 502", st)
	}
	if p.Code != "env_resolution_failed" || p.Contributor != "acme.ticket" || p.Reason == "" {
		t.Errorf("problem = %+v, want env_resolution_failed naming acme.ticket with a reason", p)
	}
	if _, err := os.Stat(marker); !os.IsNotExist(err) {
		t.Errorf("the command ran although its environment could not be collected")
	}
}
