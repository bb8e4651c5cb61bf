package exec

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/dshd/dshd/internal/proctest"
	"github.com/dshd/dshd/internal/shellenv"
)

func TestChildEnvironment(t *testing.T) {
	e := newTestExecutor(t, func(o *Options) {
		o.Policy.Set = map[string]string{"FROM_SET": "set", "PAGER": "less"}
	})
	snap := mustRun(t, e, Spec{
		Command: "env -0",
		Env:     map[string]string{"FROM_REQUEST": "req", "FROM_SET": "overridden"},
		Managed: shellenv.NewOverlay(map[string]string{"DSH_HOME": "/dsh/home", "DSH_SESSION_ID": "agent_1", "DSH_SHELL": "1"}),
	})
	got := map[string]string{}
	for _, kv := range strings.Split(strings.TrimSuffix(snap.Stdout.Text, "\x00"), "\x00") {
		k, v, _ := strings.Cut(kv, "=")
		got[k] = v
	}
	want := map[string]string{
		"KEEP_ME":             "1",
		"HOME":                "/nonexistent-home",
		"NO_COLOR":            "1",
		"TERM":                "dumb",
		"PAGER":               "less",
		"GIT_PAGER":           "cat",
		"GIT_TERMINAL_PROMPT": "0",
		"FROM_SET":            "overridden",
		"FROM_REQUEST":        "req",
		"DSH_HOME":            "/dsh/home",
		"DSH_SESSION_ID":      "agent_1",
		"DSH_SHELL":           "1",
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("child %s = %q, want %q", k, got[k], v)
		}
	}
	for _, k := range []string{"DSH_STALE", "DSHD_TOKEN", "AWS_SECRET_ACCESS_KEY"} {
		if v, ok := got[k]; ok {
			t.Errorf("child has %s=%q; it must be scrubbed", k, v)
		}
	}
	for k := range got {
		if strings.HasPrefix(k, "DSH_") && want[k] == "" {
			t.Errorf("unexpected managed variable %s", k)
		}
	}
}

func TestExitAndSignal(t *testing.T) {
	e := newTestExecutor(t, nil)
	tests := []struct {
		name     string
		command  string
		wantCode *int
		wantSig  string
		stdout   string
		stderr   string
	}{
		{"zero", "echo out; echo err >&2", ptr(0), "", "out\n", "err\n"},
		{"code", "exit 3", ptr(3), "", "", ""},
		{"sigkill", "kill -KILL $$", nil, "SIGKILL", "", ""},
		{"sigterm", "kill -TERM $$", nil, "SIGTERM", "", ""},
		{"cat without stdin", "cat", ptr(0), "", "", ""},
		{"non-login non-interactive", "shopt -q login_shell || echo nologin; [[ $- == *i* ]] || echo noninteractive", ptr(0), "", "nologin\nnoninteractive\n", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := mustRun(t, e, Spec{Command: tt.command})
			if s.State != StateExited {
				t.Errorf("state = %s, want exited", s.State)
			}
			if diff := cmp.Diff(tt.wantCode, s.ExitCode); diff != "" {
				t.Errorf("exit code (-want +got):\n%s", diff)
			}
			if s.Signal != tt.wantSig {
				t.Errorf("signal = %q, want %q", s.Signal, tt.wantSig)
			}
			if s.Stdout.Text != tt.stdout || s.Stderr.Text != tt.stderr {
				t.Errorf("output = %q / %q, want %q / %q", s.Stdout.Text, s.Stderr.Text, tt.stdout, tt.stderr)
			}
			if s.EndedAt == nil || s.PID == 0 || s.Duration <= 0 {
				t.Errorf("snapshot times/pid incomplete: %+v", s)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

func TestCwd(t *testing.T) {
	e := newTestExecutor(t, nil)
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	s := mustRun(t, e, Spec{Command: "pwd", Cwd: dir})
	if s.Stdout.Text != dir+"\n" || s.Cwd != dir {
		t.Errorf("pwd = %q (cwd %q), want %q", s.Stdout.Text, s.Cwd, dir)
	}
	s = mustRun(t, e, Spec{Command: "pwd"})
	if s.Stdout.Text != e.opts.DefaultCwd+"\n" {
		t.Errorf("default pwd = %q, want %q", s.Stdout.Text, e.opts.DefaultCwd)
	}
	for _, bad := range []string{filepath.Join(dir, "missing"), file} {
		if _, err := e.Start(testCtx(t), Spec{Command: "true", Cwd: bad}); !errors.Is(err, ErrInvalidCwd) {
			t.Errorf("Start(cwd %s) = %v, want ErrInvalidCwd", bad, err)
		}
		if _, err := e.RunProcess(testCtx(t), ProcessSpec{Command: "true", Cwd: bad}); !errors.Is(err, ErrInvalidCwd) {
			t.Errorf("RunProcess(cwd %s) = %v, want ErrInvalidCwd", bad, err)
		}
	}
	if got := e.Jobs("", ""); len(got) != 2 {
		t.Errorf("failed starts were recorded: %d jobs", len(got))
	}
}

func TestInvalidInput(t *testing.T) {
	e := newTestExecutor(t, nil)
	tests := []struct {
		name string
		spec Spec
		want error
	}{
		{"NUL in command", Spec{Command: "echo a\x00b"}, ErrInvalidInput},
		{"NUL in cwd", Spec{Command: "true", Cwd: "/tmp\x00x"}, ErrInvalidInput},
		{"NUL in env name", Spec{Command: "true", Env: map[string]string{"A\x00B": "v"}}, ErrInvalidInput},
		{"NUL in env value", Spec{Command: "true", Env: map[string]string{"A": "v\x00"}}, ErrInvalidInput},
		{"= in env name", Spec{Command: "true", Env: map[string]string{"A=B": "v"}}, ErrInvalidInput},
		{"NUL in managed", Spec{Command: "true", Managed: shellenv.NewOverlay(map[string]string{"DSH_X": "\x00"})}, ErrInvalidInput},
		{"empty command", Spec{}, ErrInvalidInput},
		{"negative timeout", Spec{Command: "true", Timeout: -1}, ErrInvalidInput},
		{"managed key in env", Spec{Command: "true", Env: map[string]string{"DSH_SESSION_ID": "x"}}, ErrManagedKeyInEnv},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := e.Start(testCtx(t), tt.spec); !errors.Is(err, tt.want) {
				t.Errorf("Start = %v, want %v", err, tt.want)
			}
		})
	}
	if _, err := e.RunProcess(testCtx(t), ProcessSpec{Command: "a\x00"}); !errors.Is(err, ErrInvalidInput) {
		t.Errorf("RunProcess NUL = %v, want ErrInvalidInput", err)
	}
	j := mustStart(t, e, Spec{Command: "true"})
	if _, err := e.Start(testCtx(t), Spec{ID: j.ID(), Command: "true"}); !errors.Is(err, ErrInvalidInput) {
		t.Errorf("Start with a taken id = %v, want ErrInvalidInput", err)
	}
	if len(e.Jobs("", "")) != 1 {
		t.Errorf("rejected starts were recorded")
	}
}

func mustStart(tb testing.TB, e *Executor, s Spec) *Job {
	tb.Helper()
	j, err := e.Start(testCtx(tb), s)
	if err != nil {
		tb.Fatalf("Start(%q): %v", s.Command, err)
	}
	return j
}

func TestStdin(t *testing.T) {
	e := newTestExecutor(t, nil)
	s := mustRun(t, e, Spec{Command: "cat", Stdin: []byte("hello\n"), HasStdin: true})
	if s.Stdout.Text != "hello\n" {
		t.Errorf("cat = %q", s.Stdout.Text)
	}
	big := bytes.Repeat([]byte("x"), 1<<20)
	s = mustRun(t, e, Spec{Command: "wc -c", Stdin: big, HasStdin: true})
	if strings.TrimSpace(s.Stdout.Text) != strconv.Itoa(len(big)) {
		t.Errorf("wc -c = %q, want %d", s.Stdout.Text, len(big))
	}
	// A child that ignores a large stdin must not hang the job.
	s = mustRun(t, e, Spec{Command: "echo ignored", Stdin: big, HasStdin: true})
	if s.Stdout.Text != "ignored\n" {
		t.Errorf("got %q", s.Stdout.Text)
	}
}

func TestTimeoutKillsGroup(t *testing.T) {
	tests := []struct {
		name    string
		command string
		signal  string
	}{
		// bash and the grandchild leave on SIGTERM.
		{"sigterm", "sleep 30 & echo $! > pid; wait", "SIGTERM"},
		// Both ignore SIGTERM (the trap is inherited as SIG_IGN): SIGKILL after the grace.
		{"sigkill after grace", "trap '' TERM; sleep 30 & echo $! > pid; wait", "SIGKILL"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newTestExecutor(t, nil)
			dir := t.TempDir()
			j := mustStart(t, e, Spec{Command: tt.command, Cwd: dir, Timeout: 200 * time.Millisecond})
			pid := proctest.ReadPID(t, filepath.Join(dir, "pid"))
			t.Cleanup(func() { proctest.KillIfAlive(pid) })
			s, err := j.Wait(testCtx(t))
			if err != nil {
				t.Fatal(err)
			}
			if s.State != StateTimedOut || s.Signal != tt.signal || s.ExitCode != nil {
				t.Errorf("state %s signal %q code %v, want timed_out %s nil", s.State, s.Signal, s.ExitCode, tt.signal)
			}
			proctest.WaitGone(t, pid)
		})
	}
}

func TestForegroundTimeoutDefaults(t *testing.T) {
	e := newTestExecutor(t, func(o *Options) {
		o.DefaultTimeout = time.Minute
		o.MaxTimeout = 2 * time.Minute
	})
	tests := []struct {
		spec Spec
		want time.Duration
	}{
		{Spec{Command: "true"}, time.Minute},
		{Spec{Command: "true", Timeout: 2 * time.Minute}, 2 * time.Minute},
		{Spec{Command: "true", Timeout: time.Second}, time.Second},
		{Spec{Command: "true", Background: true}, 0},
		{Spec{Command: "true", Background: true, Timeout: time.Hour}, time.Hour},
	}
	for _, tt := range tests {
		if s := mustRun(t, e, tt.spec); s.Timeout != tt.want {
			t.Errorf("timeout for %+v = %v, want %v", tt.spec, s.Timeout, tt.want)
		}
	}
	// Above the maximum is refused, never shortened silently.
	if _, err := e.Reserve(testCtx(t), Spec{Command: "true", Timeout: time.Hour}); !errors.Is(err, ErrTimeoutTooLong) {
		t.Errorf("Reserve with a foreground timeout over the maximum: error = %v, want ErrTimeoutTooLong", err)
	}
}

func TestCancelKillsGrandchild(t *testing.T) {
	e := newTestExecutor(t, nil)
	dir := t.TempDir()
	j := mustStart(t, e, Spec{Command: "sleep 30 & echo $! > pid; wait", Cwd: dir, Background: true})
	pid := proctest.ReadPID(t, filepath.Join(dir, "pid"))
	t.Cleanup(func() { proctest.KillIfAlive(pid) })
	s, err := e.Cancel(testCtx(t), j.ID())
	if err != nil {
		t.Fatal(err)
	}
	if s.State != StateCancelled || s.EndedAt == nil {
		t.Errorf("state = %s, want cancelled", s.State)
	}
	proctest.WaitGone(t, pid)
	// Cancelling again, or a finished job, changes nothing.
	if s2, err := e.Cancel(testCtx(t), j.ID()); err != nil || s2.State != StateCancelled {
		t.Errorf("second Cancel = %s, %v", s2.State, err)
	}
	if _, err := e.Cancel(testCtx(t), "job_missing"); !errors.Is(err, ErrJobNotFound) {
		t.Errorf("Cancel(missing) = %v, want ErrJobNotFound", err)
	}
}

func TestEscapedDescendantDoesNotHang(t *testing.T) {
	e := newTestExecutor(t, nil)
	dir := t.TempDir()
	start := time.Now()
	s := mustRun(t, e, Spec{Command: "(sleep 30 & echo $! > pid); echo hi", Cwd: dir})
	pid := proctest.ReadPID(t, filepath.Join(dir, "pid"))
	t.Cleanup(func() { proctest.KillIfAlive(pid) })
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("job took %v; an escaped descendant held it", d)
	}
	if s.Stdout.Text != "hi\n" || s.State != StateExited {
		t.Errorf("got %q %s", s.Stdout.Text, s.State)
	}
	if proctest.Gone(pid) {
		t.Fatalf("escaped sleep died early; the test proves nothing")
	}
	ctx, cancel := context.WithTimeout(context.Background(), testDeadline)
	defer cancel()
	if err := e.Close(ctx); err != nil {
		t.Fatal(err)
	}
	proctest.WaitGone(t, pid)
}

func TestCloseLeavesNoProcess(t *testing.T) {
	e := newTestExecutor(t, nil)
	dir := t.TempDir()
	var pids []int
	for i := range 3 {
		f := fmt.Sprintf("pid%d", i)
		mustStart(t, e, Spec{Command: "trap '' TERM; sleep 30 & echo $! > " + f + "; wait", Cwd: dir, Background: true})
		pids = append(pids, proctest.ReadPID(t, filepath.Join(dir, f)))
	}
	fg := mustStart(t, e, Spec{Command: "echo $$ > pidfg; exec sleep 30", Cwd: dir})
	pids = append(pids, proctest.ReadPID(t, filepath.Join(dir, "pidfg")))
	t.Cleanup(func() {
		for _, pid := range pids {
			proctest.KillIfAlive(pid)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), testDeadline)
	defer cancel()
	if err := e.Close(ctx); err != nil {
		t.Fatal(err)
	}
	for _, pid := range pids {
		proctest.WaitGone(t, pid)
	}
	if s := fg.Snapshot(); s.State != StateCancelled {
		t.Errorf("foreground state after Close = %s", s.State)
	}
	if _, err := e.Start(testCtx(t), Spec{Command: "true"}); !errors.Is(err, ErrClosed) {
		t.Errorf("Start after Close = %v, want ErrClosed", err)
	}
	if _, err := e.RunProcess(testCtx(t), ProcessSpec{Command: "true"}); !errors.Is(err, ErrClosed) {
		t.Errorf("RunProcess after Close = %v, want ErrClosed", err)
	}
}

// seqOutput is what `seq 1 n` prints.
func seqOutput(n int) []byte {
	var b bytes.Buffer
	for i := 1; i <= n; i++ {
		b.WriteString(strconv.Itoa(i))
		b.WriteByte('\n')
	}
	return b.Bytes()
}

func TestLargeOutput(t *testing.T) {
	e := newTestExecutor(t, nil)
	const n = 750000 // about 5 MiB
	want := seqOutput(n)
	j := mustStart(t, e, Spec{Command: fmt.Sprintf("seq 1 %d; echo done >&2", n)})
	s, err := j.Wait(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	out := s.Stdout
	if out.TotalBytes != int64(len(want)) || !out.Truncated || out.Dropped != 0 {
		t.Errorf("stdout total %d truncated %v dropped %d, want %d true 0", out.TotalBytes, out.Truncated, out.Dropped, len(want))
	}
	head := DefaultCaptureBytes / 2
	tail := DefaultCaptureBytes - head
	marker := fmt.Sprintf("\n…[%d bytes elided]…\n", len(want)-head-tail)
	if wantText := string(want[:head]) + marker + string(want[len(want)-tail:]); out.Text != wantText {
		t.Errorf("text is not head+marker+tail (len %d, want %d)", len(out.Text), len(wantText))
	}
	if s.Stderr.Text != "done\n" || s.Stderr.Truncated {
		t.Errorf("stderr = %+v", s.Stderr)
	}
	if got := readAll(t, j, Stdout); !bytes.Equal(got, want) {
		t.Errorf("ReadOutput returned %d bytes differing from the %d written", len(got), len(want))
	}
	if got := readAll(t, j, Stderr); string(got) != "done\n" {
		t.Errorf("ReadOutput stderr = %q", got)
	}
	fi, err := os.Stat(filepath.Join(e.opts.Home, "jobs", j.ID()+".stdout"))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("spool mode = %v, want 0600", fi.Mode().Perm())
	}
	if _, err := os.Stat(filepath.Join(e.opts.Home, "jobs", j.ID()+".stderr")); !os.IsNotExist(err) {
		t.Errorf("a small stream was spooled: %v", err)
	}
	di, err := os.Stat(filepath.Join(e.opts.Home, "jobs"))
	if err != nil || di.Mode().Perm() != 0o700 {
		t.Errorf("jobs dir mode = %v, %v", di.Mode().Perm(), err)
	}
}

func TestSpoolCapDropsAndCounts(t *testing.T) {
	e := newTestExecutor(t, func(o *Options) {
		o.CaptureBytes = 1 << 10
		o.SpoolMaxBytes = 100 << 10
	})
	want := seqOutput(60000) // ~ 350 KiB
	j := mustStart(t, e, Spec{Command: "seq 1 60000"})
	s, err := j.Wait(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	if s.Stdout.TotalBytes != int64(len(want)) || s.Stdout.Dropped != int64(len(want))-100<<10 {
		t.Errorf("total %d dropped %d, want %d %d", s.Stdout.TotalBytes, s.Stdout.Dropped, len(want), len(want)-100<<10)
	}
	if got := readAll(t, j, Stdout); !bytes.Equal(got, want[:100<<10]) {
		t.Errorf("readable stream is not the first %d bytes (got %d)", 100<<10, len(got))
	}
}

func TestNoSpoolWithoutHome(t *testing.T) {
	e := newTestExecutor(t, func(o *Options) {
		o.Home = ""
		o.CaptureBytes = 1 << 10
	})
	s := mustRun(t, e, Spec{Command: "seq 1 2000"})
	if !s.Stdout.Truncated || s.Stdout.Dropped != s.Stdout.TotalBytes {
		t.Errorf("stdout = total %d dropped %d truncated %v", s.Stdout.TotalBytes, s.Stdout.Dropped, s.Stdout.Truncated)
	}
}

func TestStreamingOutput(t *testing.T) {
	e := newTestExecutor(t, nil)
	dir := t.TempDir()
	j := mustStart(t, e, Spec{
		Command:    "echo first; while [ ! -e go ]; do sleep 0.01; done; echo second",
		Cwd:        dir,
		Background: true,
	})
	buf := make([]byte, 64)
	var got []byte
	ctx := testCtx(t)
	for string(got) != "first\n" {
		changed := j.OutputChanged()
		n, err := j.ReadOutput(Stdout, int64(len(got)), buf)
		if err != nil {
			t.Fatalf("ReadOutput: %v", err)
		}
		got = append(got, buf[:n]...)
		if n > 0 {
			continue
		}
		select {
		case <-changed:
		case <-ctx.Done():
			t.Fatalf("no output; have %q", got)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := j.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-j.OutputChanged():
	default:
		t.Error("OutputChanged of a finished job is not closed")
	}
	if rest := readAll(t, j, Stdout); string(rest) != "first\nsecond\n" {
		t.Errorf("stream = %q", rest)
	}
	if _, err := j.ReadOutput(Stdout, -1, buf); !errors.Is(err, ErrInvalidInput) {
		t.Errorf("negative offset = %v", err)
	}
}

func TestCaps(t *testing.T) {
	e := newTestExecutor(t, func(o *Options) {
		o.MaxRunning = 3
		o.MaxBackgroundPerAgent = 1
	})
	a := mustStart(t, e, Spec{Command: "sleep 30", AgentID: "a", Background: true})
	_, err := e.Start(testCtx(t), Spec{Command: "sleep 30", AgentID: "a", Background: true})
	var tm *TooManyJobsError
	if !errors.Is(err, ErrTooManyJobs) || !errors.As(err, &tm) || tm.Limit != "agent" || tm.RetryAfter <= 0 {
		t.Fatalf("second background job of agent a = %v, want agent ErrTooManyJobs", err)
	}
	mustStart(t, e, Spec{Command: "sleep 30", AgentID: "b", Background: true})
	mustStart(t, e, Spec{Command: "sleep 30", AgentID: "a"}) // foreground is not capped per agent
	_, err = e.Start(testCtx(t), Spec{Command: "true", AgentID: "c"})
	if !errors.As(err, &tm) || tm.Limit != "global" {
		t.Fatalf("fourth job = %v, want global ErrTooManyJobs", err)
	}
	if _, err := e.Cancel(testCtx(t), a.ID()); err != nil {
		t.Fatal(err)
	}
	// Slots free up when jobs finish.
	mustStart(t, e, Spec{Command: "sleep 30", AgentID: "a", Background: true})
	if got := len(e.Jobs("a", StateRunning)); got != 2 {
		t.Errorf("running jobs of a = %d, want 2", got)
	}
	// Busy counts the running jobs of the agents named, not the one
	// cancelled.
	if got := e.Busy([]string{"a"}, 0); got != 2 {
		t.Errorf("Busy(a) = %d, want 2", got)
	}
	if got := e.Busy([]string{"a", "b"}, 0); got != 3 {
		t.Errorf("Busy(a, b) = %d, want 3", got)
	}
}

// TestMayOutliveCountsAgainstAgentCap: a foreground job that may outlive
// its call holds one of its agent's background slots while it runs.
func TestMayOutliveCountsAgainstAgentCap(t *testing.T) {
	e := newTestExecutor(t, func(o *Options) {
		o.MaxRunning = 5
		o.MaxBackgroundPerAgent = 1
	})
	y := mustStart(t, e, Spec{Command: "sleep 30", AgentID: "a", MayOutlive: true})
	var tm *TooManyJobsError
	for _, s := range []Spec{
		{Command: "sleep 30", AgentID: "a", MayOutlive: true},
		{Command: "sleep 30", AgentID: "a", Background: true},
	} {
		if _, err := e.Start(testCtx(t), s); !errors.As(err, &tm) || tm.Limit != "agent" {
			t.Fatalf("start %+v beside a job that may outlive its call = %v, want the agent cap", s, err)
		}
	}
	mustStart(t, e, Spec{Command: "sleep 30", AgentID: "b", MayOutlive: true})
	if _, err := e.Cancel(testCtx(t), y.ID()); err != nil {
		t.Fatal(err)
	}
	if _, err := y.Wait(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	mustStart(t, e, Spec{Command: "sleep 30", AgentID: "a", Background: true}) // its slot is free again
}

func TestIdempotency(t *testing.T) {
	e := newTestExecutor(t, nil)
	dir := t.TempDir()
	spec := Spec{Command: "echo run >> count", Cwd: dir, IdempotencyKey: "key-1"}
	var wg sync.WaitGroup
	ids := make([]string, 8)
	for i := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			j, err := e.Start(testCtx(t), spec)
			if errors.Is(err, ErrIdempotencyKeyInUse) {
				return // the first request was still starting: the client retries
			}
			if err != nil {
				t.Errorf("Start: %v", err)
				return
			}
			j.Wait(testCtx(t))
			ids[i] = j.ID()
		}()
	}
	wg.Wait()
	ids = slices.DeleteFunc(ids, func(id string) bool { return id == "" })
	if len(ids) == 0 || slices.IndexFunc(ids, func(id string) bool { return id != ids[0] }) >= 0 {
		t.Errorf("ids differ: %v", ids)
	}
	if j, err := e.Start(testCtx(t), spec); err != nil || j.ID() != ids[0] {
		t.Errorf("retry after the start = %v, %v; want job %s", j, err, ids[0])
	}
	b, _ := os.ReadFile(filepath.Join(dir, "count"))
	if string(b) != "run\n" {
		t.Errorf("command ran %d times", strings.Count(string(b), "run"))
	}
	if j, ok := e.Lookup("", "key-1"); !ok || j.ID() != ids[0] {
		t.Errorf("Lookup = %v, %v", j, ok)
	}
	other := mustRun(t, e, Spec{Command: "true", IdempotencyKey: "key-2"})
	if other.ID == ids[0] {
		t.Error("a different key returned the same job")
	}
}

// TestLookupSkipsFailedStart looks a key up while the start that holds it
// fails to spawn: Lookup must never hand out that job, which never ran.
func TestLookupSkipsFailedStart(t *testing.T) {
	e := newTestExecutor(t, nil)
	bad := filepath.Join(t.TempDir(), "missing")
	for i := range 50 {
		key := fmt.Sprintf("key-%d", i)
		done := make(chan error, 1)
		go func() {
			_, err := e.Start(testCtx(t), Spec{Command: "true", Cwd: bad, IdempotencyKey: key})
			done <- err
		}()
		var err error
	poll:
		for {
			select {
			case err = <-done:
				break poll
			default:
			}
			if j, ok := e.Lookup("", key); ok {
				s := j.Snapshot()
				t.Fatalf("Lookup returned job %s (state %s, pid %d) of a failed start", s.ID, s.State, s.PID)
			}
		}
		if !errors.Is(err, ErrInvalidCwd) {
			t.Fatalf("Start = %v, want ErrInvalidCwd", err)
		}
	}
}

func TestRetention(t *testing.T) {
	t.Run("RetainMax", func(t *testing.T) {
		e := newTestExecutor(t, func(o *Options) {
			o.RetainMax = 1
			o.CaptureBytes = 1 << 10
		})
		first := mustRun(t, e, Spec{Command: "seq 1 5000", IdempotencyKey: "k"})
		spool := filepath.Join(e.opts.Home, "jobs", first.ID+".stdout")
		if _, err := os.Stat(spool); err != nil {
			t.Fatalf("spool file missing: %v", err)
		}
		mustRun(t, e, Spec{Command: "true"})
		if _, err := e.Job(first.ID); !errors.Is(err, ErrJobNotFound) {
			t.Errorf("Job(first) = %v, want ErrJobNotFound", err)
		}
		if _, err := os.Stat(spool); !os.IsNotExist(err) {
			t.Errorf("spool file not removed: %v", err)
		}
		if _, ok := e.Lookup("", "k"); ok {
			t.Error("Lookup found a forgotten job")
		}
		if _, err := e.Start(testCtx(t), Spec{Command: "seq 1 5000", IdempotencyKey: "k"}); !errors.Is(err, ErrIdempotencyJobGone) {
			t.Errorf("Start with the key of a forgotten job = %v, want ErrIdempotencyJobGone", err)
		}
	})
	t.Run("Retention", func(t *testing.T) {
		var mu sync.Mutex
		now := time.Now()
		clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
		e := newTestExecutor(t, func(o *Options) {
			o.Now = clock
			o.Retention = time.Hour
			o.CaptureBytes = 1 << 10
		})
		j := mustRun(t, e, Spec{Command: "seq 1 5000"})
		spool := filepath.Join(e.opts.Home, "jobs", j.ID+".stdout")
		e.prune()
		if _, err := e.Job(j.ID); err != nil {
			t.Fatalf("job removed too early: %v", err)
		}
		mu.Lock()
		now = now.Add(time.Hour)
		mu.Unlock()
		e.prune()
		if _, err := e.Job(j.ID); !errors.Is(err, ErrJobNotFound) {
			t.Errorf("Job after retention = %v, want ErrJobNotFound", err)
		}
		if _, err := os.Stat(spool); !os.IsNotExist(err) {
			t.Errorf("spool file not removed: %v", err)
		}
	})
}

func TestJobsFilter(t *testing.T) {
	e := newTestExecutor(t, nil)
	mustRun(t, e, Spec{Command: "true", AgentID: "a"})
	mustRun(t, e, Spec{Command: "true", AgentID: "b"})
	run := mustStart(t, e, Spec{Command: "sleep 30", AgentID: "a", Background: true})
	tests := []struct {
		agent string
		state State
		want  int
	}{
		{"", "", 3}, {"a", "", 2}, {"a", StateRunning, 1}, {"", StateExited, 2}, {"c", "", 0},
	}
	for _, tt := range tests {
		got := e.Jobs(tt.agent, tt.state)
		if len(got) != tt.want {
			t.Errorf("Jobs(%q, %q) = %d jobs, want %d", tt.agent, tt.state, len(got), tt.want)
		}
		if !slices.IsSortedFunc(got, func(a, b Snapshot) int { return strings.Compare(a.ID, b.ID) }) {
			t.Errorf("Jobs(%q, %q) not sorted", tt.agent, tt.state)
		}
	}
	if j, err := e.Job(run.ID()); err != nil || j != run {
		t.Errorf("Job(%s) = %v, %v", run.ID(), j, err)
	}
}

func TestGivenIDAndManagedSnapshot(t *testing.T) {
	e := newTestExecutor(t, nil)
	id := e.NewID()
	if !strings.HasPrefix(id, "job_") {
		t.Fatalf("NewID = %q", id)
	}
	managed := shellenv.NewOverlay(map[string]string{"DSH_HOME": "/h", "DSH_SHELL": "1"})
	s := mustRun(t, e, Spec{ID: id, Command: "echo $DSH_HOME", Managed: managed})
	if s.ID != id || s.Stdout.Text != "/h\n" || !slices.Equal(s.Managed.All(), managed.All()) {
		t.Errorf("snapshot = %+v", s)
	}
}

func TestRunProcess(t *testing.T) {
	e := newTestExecutor(t, nil)
	dir := t.TempDir()
	res, err := e.RunProcess(testCtx(t), ProcessSpec{
		Command:  `cat; echo "$EXTRA ${DSH_STALE-unset} ${DSHD_TOKEN-unset} $(pwd)" >&2; exit 2`,
		Cwd:      dir,
		Stdin:    []byte(`{"a":1}`),
		ExtraEnv: map[string]string{"EXTRA": "x", "DSH_SESSION_ID": "dropped"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if string(res.Stdout) != `{"a":1}` || string(res.Stderr) != "x unset unset "+dir+"\n" || res.ExitCode == nil || *res.ExitCode != 2 || res.TimedOut {
		t.Errorf("result = %+v (stdout %q stderr %q)", res, res.Stdout, res.Stderr)
	}
	res, err = e.RunProcess(testCtx(t), ProcessSpec{Command: "echo ${DSH_SESSION_ID-none}", ExtraEnv: map[string]string{"DSH_SESSION_ID": "x"}})
	if err != nil || string(res.Stdout) != "none\n" {
		t.Errorf("managed name leaked: %q %v", res.Stdout, err)
	}
	res, err = e.RunProcess(testCtx(t), ProcessSpec{Command: "sleep 30 & echo $! > pid; wait", Cwd: dir, Timeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if !res.TimedOut || res.Signal != "SIGTERM" || res.ExitCode != nil {
		t.Errorf("timeout result = %+v", res)
	}
	proctest.WaitGone(t, proctest.ReadPID(t, filepath.Join(dir, "pid")))
	res, err = e.RunProcess(testCtx(t), ProcessSpec{Command: "head -c 3000000 /dev/zero"})
	if err != nil || len(res.Stdout) != ProcessCaptureBytes {
		t.Errorf("capture = %d bytes, %v; want %d", len(res.Stdout), err, ProcessCaptureBytes)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	res, err = e.RunProcess(ctx, ProcessSpec{Command: "sleep 30"})
	if !errors.Is(err, context.DeadlineExceeded) || res.Signal != "SIGTERM" {
		t.Errorf("ctx end = %+v, %v", res, err)
	}
	if got := len(e.Jobs("", "")); got != 0 {
		t.Errorf("RunProcess recorded %d jobs", got)
	}
}

func TestMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	e := newTestExecutor(t, func(o *Options) { o.Registerer = reg })
	mustRun(t, e, Spec{Command: "true"})
	j := mustStart(t, e, Spec{Command: "sleep 30", Background: true})
	if _, err := e.Cancel(testCtx(t), j.ID()); err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{
		`dshd_jobs_finished_total{state="cancelled"}`: 1,
		`dshd_jobs_finished_total{state="exited"}`:    1,
		`dshd_jobs_finished_total{state="timed_out"}`: 0,
		`dshd_jobs_running`:                           0,
		`dshd_jobs_started_total`:                     2,
		`dshd_exec_spawn_seconds_count`:               2,
		`dshd_spool_budget_bytes`:                     DefaultSpoolTotalBytes,
		`dshd_spool_bytes`:                            0,
		`dshd_spool_evicted_jobs_total`:               0,
	}
	if diff := cmp.Diff(want, gather(t, reg)); diff != "" {
		t.Errorf("metrics (-want +got):\n%s", diff)
	}
	if _, err := New(Options{Registerer: reg}); err == nil {
		t.Error("registering twice succeeded")
	}
}

func TestNewOptions(t *testing.T) {
	tests := []struct {
		name string
		opts Options
	}{
		{"bad inherit", Options{Policy: EnvPolicy{Inherit: "some"}}},
		{"managed set", Options{Policy: EnvPolicy{Set: map[string]string{"DSH_X": "1"}}}},
		{"bad set name", Options{Policy: EnvPolicy{Set: map[string]string{"A=B": "1"}}}},
		{"relative home", Options{Home: "rel"}},
	}
	for _, tt := range tests {
		if _, err := New(tt.opts); !errors.Is(err, ErrInvalidOptions) {
			t.Errorf("%s: New = %v, want ErrInvalidOptions", tt.name, err)
		}
	}
	home := t.TempDir()
	stale := filepath.Join(home, "jobs", "job_old.stdout")
	os.MkdirAll(filepath.Dir(stale), 0o755)
	os.WriteFile(stale, []byte("x"), 0o600)
	newTestExecutor(t, func(o *Options) { o.Home = home })
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("stale spool kept: %v", err)
	}
}

// gather flattens counters, gauges and histogram counts to name{labels}.
func gather(tb testing.TB, reg *prometheus.Registry) map[string]float64 {
	tb.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		tb.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			name := mf.GetName()
			var labels []string
			for _, lp := range m.GetLabel() {
				labels = append(labels, fmt.Sprintf("%s=%q", lp.GetName(), lp.GetValue()))
			}
			if len(labels) > 0 {
				name += "{" + strings.Join(labels, ",") + "}"
			}
			switch {
			case m.Counter != nil:
				out[name] = m.GetCounter().GetValue()
			case m.Gauge != nil:
				out[name] = m.GetGauge().GetValue()
			case m.Histogram != nil:
				out[name+"_count"] = float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return out
}

// TestConcurrentOutputNotLost runs many short jobs at once on a busy
// machine: each one's output must arrive whole even when its reader is
// scheduled after the post-exit drain deadline.
func TestConcurrentOutputNotLost(t *testing.T) {
	e := newTestExecutor(t, func(o *Options) { o.MaxRunning = 200 })
	ctx := context.Background()
	for round := range 3 {
		var wg sync.WaitGroup
		for i := range 64 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				want := fmt.Sprintf("round %d job %d", round, i)
				j, err := e.Start(ctx, Spec{Command: "printf '%s' '" + want + "'"})
				if err != nil {
					t.Error(err)
					return
				}
				snap, err := j.Wait(ctx)
				if err != nil {
					t.Error(err)
					return
				}
				if snap.Stdout.Text != want {
					t.Errorf("job %s output %q, want %q", snap.ID, snap.Stdout.Text, want)
				}
			}()
		}
		wg.Wait()
	}
}

// TestCloseBudgetShorterThanGrace: when the caller's budget ends before the
// grace, Close still ends with every group killed (the final SIGKILL is
// sent at once) and says that the grace was cut short.
func TestCloseBudgetShorterThanGrace(t *testing.T) {
	e := newTestExecutor(t, func(o *Options) { o.Grace = 20 * time.Second })
	dir := t.TempDir()
	j := mustStart(t, e, Spec{Command: "trap '' TERM; echo $$ > pid; sleep 1000 & echo $! > child; setsid sh -c 'trap \"\" TERM; echo $$ > escaped; exec sleep 1000' & wait", Cwd: dir, Background: true})
	pids := []int{proctest.ReadPID(t, filepath.Join(dir, "pid")), proctest.ReadPID(t, filepath.Join(dir, "child")), proctest.ReadPID(t, filepath.Join(dir, "escaped"))}
	t.Cleanup(func() {
		for _, pid := range pids {
			proctest.KillIfAlive(pid)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	err := e.Close(ctx)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Close = %v, want an error wrapping the budget's end", err)
	}
	// SIGKILL is sent before Close returns; the processes die right after.
	for _, pid := range pids {
		proctest.WaitGone(t, pid)
	}
	if s := j.Snapshot(); s.State != StateCancelled || s.Signal != "SIGKILL" {
		t.Errorf("job after Close: state %s signal %q, want cancelled by SIGKILL", s.State, s.Signal)
	}
}

func TestGraceAboveMaximumRejected(t *testing.T) {
	_, err := New(Options{Home: t.TempDir(), Grace: MaxGrace + time.Millisecond})
	if !errors.Is(err, ErrInvalidOptions) {
		t.Errorf("New with grace above MaxGrace = %v, want ErrInvalidOptions", err)
	}
}

// TestOpenOutput reads ranges of a stream in memory and in the spool. A
// reader covers what was readable when it was opened, and keeps reading
// after the job is removed.
func TestOpenOutput(t *testing.T) {
	e := newTestExecutor(t, func(o *Options) { o.CaptureBytes = 1 << 10 })
	small := mustStart(t, e, Spec{Command: "printf hello"})
	big := mustStart(t, e, Spec{Command: "seq 1 60000"})
	want := seqOutput(60000)
	for _, j := range []*Job{small, big} {
		if _, err := j.Wait(testCtx(t)); err != nil {
			t.Fatal(err)
		}
	}
	open := func(j *Job, s Stream, off int64) (int64, io.ReadCloser) {
		t.Helper()
		r, n, err := j.OpenOutput(s, off)
		if err != nil {
			t.Fatalf("OpenOutput(%d): %v", off, err)
		}
		return n, r
	}
	for _, tc := range []struct {
		name string
		j    *Job
		s    Stream
		off  int64
		want []byte
	}{
		{"memory", small, Stdout, 0, []byte("hello")},
		{"memory from an offset", small, Stdout, 2, []byte("llo")},
		{"memory past the end", small, Stdout, 99, nil},
		{"empty stream", small, Stderr, 0, nil},
		{"spool", big, Stdout, 0, want},
		{"spool from an offset", big, Stdout, 1000, want[1000:]},
		{"spool past the end", big, Stdout, int64(len(want)) + 5, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n, r := open(tc.j, tc.s, tc.off)
			defer r.Close()
			var got bytes.Buffer
			if _, err := io.Copy(&got, r); err != nil {
				t.Fatal(err)
			}
			if n != int64(len(tc.want)) || !bytes.Equal(got.Bytes(), tc.want) {
				t.Errorf("got %d bytes (n=%d), want %d", got.Len(), n, len(tc.want))
			}
		})
	}
	if _, _, err := big.OpenOutput(Stdout, -1); !errors.Is(err, ErrInvalidInput) {
		t.Errorf("negative offset = %v, want ErrInvalidInput", err)
	}
	// Opened before the job is removed: still readable, all of it.
	n, r := open(big, Stdout, 0)
	defer r.Close()
	big.remove()
	got, err := io.ReadAll(r)
	if err != nil || n != int64(len(want)) || !bytes.Equal(got, want) {
		t.Errorf("read after removal: %d bytes, %v; want %d", len(got), err, len(want))
	}
	if _, _, err := big.OpenOutput(Stdout, 0); !errors.Is(err, ErrJobNotFound) {
		t.Errorf("OpenOutput after removal = %v, want ErrJobNotFound", err)
	}
}
