package httpapi

import (
	"bytes"
	"encoding/json"
	"net/http/httptest"
	"reflect"
	"testing"
	"time"

	"github.com/dshd/dshd/internal/http/api"
)

// encodingJSON is the generated response's encoding of j: encoding/json's
// Encoder, which ends the value with a newline.
func encodingJSON(t testing.TB, j api.Job) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := json.NewEncoder(&buf).Encode(api.Exec200JSONResponse(j)); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func jobAnswerBody(t testing.TB, j api.Job) []byte {
	t.Helper()
	w := httptest.NewRecorder()
	if err := jobAnswer(j).VisitExecResponse(w); err != nil {
		t.Fatal(err)
	}
	if w.Code != 200 || w.Header().Get("Content-Type") != "application/json" {
		t.Fatalf("answer: %d %q", w.Code, w.Header().Get("Content-Type"))
	}
	return w.Body.Bytes()
}

// fullJob has every field set, nested ones included.
func fullJob() api.Job {
	at := time.Date(2026, 12, 2, 10, 41, 1, 123456789, time.FixedZone("x", 3600+1800))
	reason := api.OutputDroppedReason("spool_limit")
	return api.Job{
		AgentId: ptr("agt_1"), Background: true, Command: "echo hi", CreatedAt: at, Cwd: "/home/me",
		DurationMs: ptr(int64(12)), EndedAt: ptr(at.Add(time.Second)), ExitCode: ptr(int32(-1)), Id: "job_1",
		Input:      &api.JobInput{Bytes: 3, Closed: true, LastWriteAt: ptr(at), Open: true, Text: ptr("abc"), Truncated: ptr(true), Writes: 1},
		KilledBy:   ptr(api.JobKilledBy("timeout")),
		Limits:     &api.JobLimits{Cpu: ptr(0.5), Enforcement: api.JobLimitsEnforcement{Cpu: ptr(api.LimitEnforcement("cgroup"))}, MemoryBytes: ptr(int64(1 << 20)), Pids: ptr(int64(64))},
		ManagedEnv: map[string]string{"DSH_SHELL": "1", "DSH_HOME": "/h", "A": "<&>"},
		Network:    &api.NetworkRecord{Reached: []api.NetworkHostCount{{Count: 1, Host: "a.test"}}, Refused: []api.NetworkHostCount{{Count: 2, Host: "b.test", Reason: ptr("not allowed")}}},
		Pid:        4242,
		Remaining:  &api.JobRemaining{Processes: 2, Since: at},
		Sandbox:    &api.SandboxPolicy{Allow: &api.NetworkAllowlist{"a.test"}, Network: "allowlist", Policy: "workspace-write"},
		Signal:     ptr("SIGKILL"), StartedAt: at, State: "killed",
		Stderr:    api.Output{DroppedBytes: ptr(int64(7)), DroppedReason: &reason, Text: "err\n", TotalBytes: 9, Truncated: true},
		Stdout:    api.Output{Text: "out", TotalBytes: 3},
		Terminal:  &api.JobTerminal{Cols: 80, Rows: 24, Term: "xterm-256color"},
		TimeoutMs: ptr(int64(120000)),
		Usage:     &api.JobUsage{CpuMs: 5, PeakMemoryBytes: ptr(int64(31330304)), PeakPids: ptr(int64(3))},
	}
}

// TestJobJSONMatchesEncodingJSON: the hand-written encoding of a job is the
// generated response's, byte for byte: for a job with every field set (a
// field added to the contract fails here until appendJob writes it), for
// the usual foreground answer, and for strings encoding/json escapes.
func TestJobJSONMatchesEncodingJSON(t *testing.T) {
	full := fullJob()
	for _, v := range []any{full, full.Stderr, *full.Usage, *full.Sandbox} {
		rv := reflect.ValueOf(v)
		for i := range rv.NumField() {
			if rv.Field(i).IsZero() {
				t.Fatalf("fullJob leaves %s.%s unset: set it, and appendJob must write it", rv.Type().Name(), rv.Type().Field(i).Name)
			}
		}
	}
	usual := api.Job{
		Command: "true", CreatedAt: time.Now(), Cwd: "/work", DurationMs: ptr(int64(1)), EndedAt: ptr(time.Now()),
		ExitCode: ptr(int32(0)), Id: "job_01m8ty0608erztenff352y9q4j", ManagedEnv: map[string]string{"DSH_HOME": "/tmp/h", "DSH_SHELL": "1"},
		Pid: 4652, Sandbox: &api.SandboxPolicy{Network: "on", Policy: "unrestricted"}, StartedAt: time.Now(), State: "exited",
		TimeoutMs: ptr(int64(120000)), Usage: &api.JobUsage{CpuMs: 1, PeakMemoryBytes: ptr(int64(31330304))},
	}
	odd := usual
	odd.Command = "echo \"<b>\" & 'x' \\ \u2028 \u2029 \x00\x1f\x7f é 😀"
	odd.Cwd = "/tmp/bad\xff\xfeutf8"
	odd.Stdout = api.Output{Text: "line\r\n\t\b\f<script>\xc3", TotalBytes: 1 << 40}
	odd.ManagedEnv = map[string]string{"Z": "\"", "\xff": "v", "": ""}
	odd.AgentId = ptr("")
	odd.Sandbox = nil
	odd.Usage = nil
	odd.ManagedEnv = nil
	odd.EndedAt = nil
	odd.ExitCode = nil
	odd.DurationMs, odd.TimeoutMs = nil, nil
	utc := usual
	utc.CreatedAt = time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC)
	utc.StartedAt = time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC)
	for name, j := range map[string]api.Job{"full": full, "usual": usual, "odd": odd, "zero": {}, "times": utc} {
		want := encodingJSON(t, j)
		if got := jobAnswerBody(t, j); !bytes.Equal(got, want) {
			t.Errorf("%s:\n got %s\nwant %s", name, got, want)
		}
	}

	// A time encoding/json refuses is refused alike.
	bad := usual
	bad.CreatedAt = time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)
	if _, ok := appendJob(nil, &bad); ok {
		t.Error("appendJob encoded a year encoding/json refuses")
	}
	if err := jobAnswer(bad).VisitExecResponse(httptest.NewRecorder()); err == nil {
		t.Error("a job encoding/json refuses was answered")
	}
}

// FuzzJobJSON compares the two encodings over arbitrary strings and numbers.
func FuzzJobJSON(f *testing.F) {
	f.Add("true", "/work", "out\n", "DSH_X", "1", int64(0), int32(0))
	f.Add("<&>\u2028", "\xff", "\x00", "", "é", int64(-1), int32(-2147483648))
	f.Fuzz(func(t *testing.T, command, cwd, text, key, val string, n int64, code int32) {
		j := fullJob()
		j.Command, j.Cwd, j.Stdout.Text, j.ManagedEnv = command, cwd, text, map[string]string{key: val, "DSH_SHELL": val}
		j.Stdout.TotalBytes, j.ExitCode, j.Signal = n, &code, ptr(text)
		j.Sandbox = &api.SandboxPolicy{Network: api.SandboxNetwork(val), Policy: api.SandboxFS(key)}
		if want, got := encodingJSON(t, j), jobAnswerBody(t, j); !bytes.Equal(got, want) {
			t.Fatalf("\n got %s\nwant %s", got, want)
		}
	})
}
