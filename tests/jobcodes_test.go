package tests

import (
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

	// The model's write_stdin: an ended job has ended, a running one
	// without input takes none.
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
}

// cancelJob cancels job id (at the end of a test: defer s.cancelJob(t, id);
// a deferred s.Do(...).Body.Close() would cancel it at once).
func (s *testServer) cancelJob(t *testing.T, id string) {
	t.Helper()
	s.Do(t, "DELETE", "/jobs/"+id, nil).Body.Close()
}
