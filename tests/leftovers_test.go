package tests

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/dshd/dshd/internal/testenv"
)

// leftoverJob is a job record with what it left running.
type leftoverJob struct {
	ID        string `json:"id"`
	State     string `json:"state"`
	Remaining *struct {
		Processes int       `json:"processes"`
		Since     time.Time `json:"since"`
	} `json:"remaining"`
	EndedAt *time.Time `json:"endedAt"`
}

// TestLeftoversThroughServer: a command that returns while `nohup sleep`
// runs on leaves a job that says so; job_kill and DELETE /jobs/{id} stop
// the leftover (they answered without killing it before), and shutdown
// kills one nobody stopped. Both containment modes.
func TestLeftoversThroughServer(t *testing.T) {
	for _, mode := range []string{"cgroup", "group"} {
		t.Run(mode, func(t *testing.T) {
			if mode == "cgroup" && os.Getuid() != 0 {
				testenv.Need(t, "cgroup mode needs root and a writable cgroup v2 subtree")
			}
			testLeftovers(t, mode)
		})
	}
}

func testLeftovers(t *testing.T, mode string) {
	s := startServer(t, withConfig(fmt.Sprintf("jobs:\n  graceMs: 200\n  containment: %s\n", mode)))
	run := randomMark(t)
	t.Cleanup(func() { killPIDs(survivorsNow(run)) })
	leave := func(i int) string {
		return fmt.Sprintf("export %s='%s/%d;'; nohup sleep 777 >/dev/null 2>&1 & echo started", markEnv, run, i)
	}
	get := func(id string) leftoverJob {
		t.Helper()
		var j leftoverJob
		if st := s.DoJSON(t, "GET", "/jobs/"+id, nil, &j); st != 200 {
			t.Fatalf("GET /jobs/%s = %d", id, st)
		}
		return j
	}
	checkLeft := func(j leftoverJob) {
		t.Helper()
		if j.State != "exited" || j.Remaining == nil || j.Remaining.Processes != 1 || j.EndedAt == nil || !j.Remaining.Since.Equal(*j.EndedAt) {
			t.Errorf("job with a leftover = %+v (remaining %+v), want exited with 1 process remaining since its end", j, j.Remaining)
		}
	}

	// Through the model's tools: the call returns, job_list shows the
	// leftover, job_kill stops it.
	var a agent
	if st := s.DoJSON(t, "POST", "/agents", map[string]any{}, &a); st != 201 {
		t.Fatalf("create agent = %d", st)
	}
	r := s.callTool(t, a.ID, "bash", map[string]any{"command": leave(0)})
	if r.IsError || strings.TrimSpace(r.Text) != "started" {
		t.Fatalf("tool call = %+v", r)
	}
	if pids, sleeps := waitSleeps(run+"/0;", 1); sleeps != 1 {
		t.Fatalf("the leftover sleep is not running: %v", pids)
	}
	checkLeft(get(r.JobID))
	if l := s.callTool(t, a.ID, "job_list", map[string]any{}); !strings.Contains(l.Text, "1 process(es) left running") {
		t.Errorf("job_list = %q, want the leftover shown", l.Text)
	}
	k := s.callTool(t, a.ID, "job_kill", map[string]any{"jobId": r.JobID})
	if k.IsError || !strings.Contains(k.Text, "left running") {
		t.Errorf("job_kill = %+v", k)
	}
	if left := survivors(run+"/0;", 3*time.Second); len(left) > 0 {
		t.Errorf("job_kill left the leftover running: %v", left)
	}
	if j := get(r.JobID); j.Remaining != nil || j.State != "exited" {
		t.Errorf("after job_kill: %+v (remaining %+v)", j, j.Remaining)
	}

	// Through HTTP: DELETE /jobs/{id} stops it.
	var j leftoverJob
	if st := s.DoJSON(t, "POST", "/exec", map[string]any{"command": leave(1)}, &j); st != 200 {
		t.Fatalf("POST /exec = %d", st)
	}
	checkLeft(get(j.ID))
	var d leftoverJob
	if st := s.DoJSON(t, "DELETE", "/jobs/"+j.ID, nil, &d); st != 200 || d.Remaining != nil || d.State != "exited" {
		t.Errorf("DELETE /jobs/%s = %d, %+v remaining %+v; want 200, exited, none", j.ID, st, d, d.Remaining)
	}
	if left := survivors(run+"/1;", 3*time.Second); len(left) > 0 {
		t.Errorf("DELETE left the leftover running: %v", left)
	}

	// Shutdown kills one nobody stopped.
	j = leftoverJob{}
	if st := s.DoJSON(t, "POST", "/exec", map[string]any{"command": leave(2)}, &j); st != 200 {
		t.Fatalf("POST /exec = %d", st)
	}
	checkLeft(get(j.ID))
	s.stop(t)
	if left := survivors(run+"/2;", 3*time.Second); len(left) > 0 {
		t.Errorf("shutdown left the leftover running: %v", left)
	}
}
