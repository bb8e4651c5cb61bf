package tests

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// TestControlCodesOfEndedAndRunningJobs: each 409 the contract documents
// for the control routes, for each kind of job. A job that has ended is
// job_not_running whatever it was (no input, a pipe, a terminal), for
// writing, closing, resizing and signalling; input_not_open and
// not_a_terminal are for running jobs only. The write_stdin model tool
// reads the same distinction.
func TestControlCodesOfEndedAndRunningJobs(t *testing.T) {
	t.Parallel()
	s := startServer(t)

	post := func(t *testing.T, id, route string, body map[string]any) (int, string) {
		t.Helper()
		var p problem
		st := s.DoJSON(t, "POST", "/jobs/"+id+"/"+route, body, &p)
		return st, p.Code
	}
	ended := map[string]map[string]any{
		"no input": {"command": "true"},
		"pipe":     {"command": "true", "openStdin": true},
		"terminal": {"command": "true", "tty": true},
	}
	for kind, spec := range ended {
		j := s.startInteractive(t, spec)
		s.waitJob(t, j.ID)
		for _, c := range []struct {
			route string
			body  map[string]any
		}{
			{"stdin", map[string]any{"data": "late"}},
			{"stdin", map[string]any{"close": true}},
			{"stdin", map[string]any{}},
			{"resize", map[string]any{"cols": 80, "rows": 24}},
			{"signal", map[string]any{"signal": "SIGINT"}},
		} {
			if st, code := post(t, j.ID, c.route, c.body); st != 409 || code != "job_not_running" {
				t.Errorf("%s job, %s %v after the end = %d %q, want 409 job_not_running", kind, c.route, c.body, st, code)
			}
		}
	}

	// Running jobs: the codes of what they lack.
	plain := s.startInteractive(t, map[string]any{"command": "sleep 30"})
	defer s.cancelJob(t, plain.ID)
	pipe := s.startInteractive(t, map[string]any{"command": "sleep 30", "openStdin": true})
	defer s.cancelJob(t, pipe.ID)
	if st, code := post(t, pipe.ID, "stdin", map[string]any{"close": true}); st != 200 {
		t.Fatalf("close a pipe = %d %q", st, code)
	}
	for _, c := range []struct {
		name, id, route string
		body            map[string]any
		code            string
	}{
		{"write to a job without input", plain.ID, "stdin", map[string]any{"data": "x"}, "input_not_open"},
		{"close a job without input", plain.ID, "stdin", map[string]any{"close": true}, "input_not_open"},
		{"write to a closed pipe", pipe.ID, "stdin", map[string]any{"data": "x"}, "input_not_open"},
		{"close a closed pipe", pipe.ID, "stdin", map[string]any{"close": true}, "input_not_open"},
		{"resize a job without a terminal", plain.ID, "resize", map[string]any{"cols": 80, "rows": 24}, "not_a_terminal"},
		{"resize a pipe job", pipe.ID, "resize", map[string]any{"cols": 80, "rows": 24}, "not_a_terminal"},
	} {
		if st, code := post(t, c.id, c.route, c.body); st != 409 || code != c.code {
			t.Errorf("%s = %d %q, want 409 %s", c.name, st, code, c.code)
		}
	}

	// The other codes of the control routes.
	if st, code := post(t, "job_nope", "stdin", map[string]any{"data": "x"}); st != 404 || code != "job_not_found" {
		t.Errorf("write to an unknown job = %d %q, want 404 job_not_found", st, code)
	}
	if st, code := post(t, "job_nope", "resize", map[string]any{"cols": 80, "rows": 24}); st != 404 || code != "job_not_found" {
		t.Errorf("resize an unknown job = %d %q, want 404 job_not_found", st, code)
	}
	if st, code := post(t, "job_nope", "signal", map[string]any{"signal": "SIGINT"}); st != 404 || code != "job_not_found" {
		t.Errorf("signal an unknown job = %d %q, want 404 job_not_found", st, code)
	}
	// A signal off the allowlist is refused by the contract's enum.
	if st, code := post(t, plain.ID, "signal", map[string]any{"signal": "SIGSEGV"}); st != 400 || code != "bad_request" {
		t.Errorf("signal SIGSEGV = %d %q, want 400 bad_request", st, code)
	}
	// A program that does not read: the pipe takes 64 KiB, then the write
	// waits timeoutMs and is input_blocked, saying how much was taken.
	reader := s.startInteractive(t, map[string]any{"command": "sleep 30", "openStdin": true})
	defer s.cancelJob(t, reader.ID)
	var p problem
	st := s.DoJSON(t, "POST", "/jobs/"+reader.ID+"/stdin", map[string]any{"data": strings.Repeat("x", 200_000), "timeoutMs": 200}, &p)
	if st != 409 || p.Code != "input_blocked" || !strings.Contains(p.Detail, "of 200000 bytes were taken") {
		t.Errorf("write to a program that does not read = %d %q %q, want 409 input_blocked saying how many bytes were taken", st, p.Code, p.Detail)
	}
	var all []job
	s.DoJSON(t, "GET", "/jobs?state=running", nil, &all)
	for _, id := range []string{plain.ID, pipe.ID, reader.ID} {
		if !slices.ContainsFunc(all, func(j job) bool { return j.ID == id }) {
			t.Errorf("job %s is no longer running after refused requests", id)
		}
	}

	// The model's write_stdin: an ended job has ended, a running one
	// without input takes none, one that does not read is not reading.
	var a agent
	s.DoJSON(t, "POST", "/agents", map[string]any{}, &a)
	done := s.callTool(t, a.ID, "bash", map[string]any{"command": "true"})
	running := s.callTool(t, a.ID, "bash", map[string]any{"command": "sleep 30", "yield_time_ms": 100})
	if done.JobID == "" || running.JobID == "" {
		t.Fatalf("bash results without a job id: %+v %+v", done, running)
	}
	defer s.cancelJob(t, running.JobID)
	if r := s.callTool(t, a.ID, "write_stdin", map[string]any{"session_id": done.JobID, "chars": "x\n"}); !r.IsError || !strings.Contains(r.Text, "has ended") {
		t.Errorf("write_stdin to an ended job = %+v, want isError saying it has ended", r)
	}
	if r := s.callTool(t, a.ID, "write_stdin", map[string]any{"session_id": running.JobID, "chars": "x\n"}); !r.IsError || !strings.Contains(r.Text, "takes no input") {
		t.Errorf("write_stdin to a running job without input = %+v, want isError saying it takes no input", r)
	}
	deaf := s.callTool(t, a.ID, "bash", map[string]any{"command": "sleep 30", "tty": true, "yield_time_ms": 100})
	if deaf.JobID == "" {
		t.Fatalf("bash with tty: %+v", deaf)
	}
	defer s.cancelJob(t, deaf.JobID)
	// The terminal holds 4 KiB of lines nobody reads; the write waits a second.
	if r := s.callTool(t, a.ID, "write_stdin", map[string]any{"session_id": deaf.JobID, "chars": strings.Repeat("xxxxxxx\n", 12_500), "yield_time_ms": 100}); !r.IsError || !strings.Contains(r.Text, "not reading its input") {
		t.Errorf("write_stdin to a terminal program that does not read = %.300s, want isError saying it is not reading", fmt.Sprintf("%+v", r))
	}
}

// cancelJob cancels job id (at the end of a test: defer s.cancelJob(t, id);
// a deferred s.Do(...).Body.Close() would cancel it at once).
func (s *testServer) cancelJob(t *testing.T, id string) {
	t.Helper()
	s.Do(t, "DELETE", "/jobs/"+id, nil).Body.Close()
}
