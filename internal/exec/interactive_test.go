package exec

import (
	"os"

	"github.com/dshd/dshd/internal/testenv"

	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dshd/dshd/internal/sandbox"
)

// waitOutput waits until stdout of j contains want, and returns it.
func waitOutput(tb testing.TB, j *Job, want string) string {
	tb.Helper()
	deadline := time.Now().Add(testDeadline)
	for {
		ch := j.OutputChanged()
		out := j.Snapshot().Stdout.Text
		if strings.Contains(out, want) {
			return out
		}
		select {
		case <-ch:
		case <-time.After(time.Until(deadline)):
			tb.Fatalf("stdout never contained %q; got %q", want, out)
		}
	}
}

func TestTerminalJob(t *testing.T) {
	e := newTestExecutor(t, nil)
	snap := mustRun(t, e, Spec{
		Command: `[ -t 0 ] && [ -t 1 ] && [ -t 2 ] && echo tty; echo "$TERM ${NO_COLOR-unset}"; stty size; echo err >&2; ps -o sid= -p $$ | tr -d ' '; echo $$`,
		TTY:     true, Cols: 100, Rows: 30,
	})
	if snap.ExitCode == nil || *snap.ExitCode != 0 {
		t.Fatalf("exit %v signal %q output %q", snap.ExitCode, snap.Signal, snap.Stdout.Text)
	}
	lines := strings.Split(strings.TrimSpace(strings.ReplaceAll(snap.Stdout.Text, "\r\n", "\n")), "\n")
	if len(lines) != 6 {
		t.Fatalf("output %q: want 6 lines", snap.Stdout.Text)
	}
	if lines[0] != "tty" || lines[1] != DefaultTerm+" unset" || lines[2] != "30 100" || lines[3] != "err" {
		t.Errorf("output %q: want tty, %s unset, 30 100, err (stderr in the one stream)", snap.Stdout.Text, DefaultTerm)
	}
	if lines[4] != lines[5] {
		t.Errorf("session id %s, pid %s: the command does not lead its own session", lines[4], lines[5])
	}
	if snap.Stderr.TotalBytes != 0 {
		t.Errorf("stderr has %d bytes; a terminal job has one stream", snap.Stderr.TotalBytes)
	}
	if snap.Terminal == nil || snap.Terminal.Cols != 100 || snap.Terminal.Rows != 30 {
		t.Errorf("Terminal = %+v", snap.Terminal)
	}
	if snap.Input == nil || snap.Input.Open {
		t.Errorf("Input = %+v, want a closed record", snap.Input)
	}
}

func TestTerminalInputResizeSignal(t *testing.T) {
	e := newTestExecutor(t, func(o *Options) { o.Term = "vt100" })
	ctx := testCtx(t)
	j, err := e.Start(ctx, Spec{
		Command: `trap 'echo TRAPPED; exit 7' INT; trap 'echo WINCH $(tput cols)' WINCH; echo $TERM; read -p 'name? ' n; echo "hello $n"; while :; do sleep 0.05; done`,
		TTY:     true, Background: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	waitOutput(t, j, "name? ")
	if !strings.Contains(j.Snapshot().Stdout.Text, "vt100") {
		t.Errorf("TERM is not the configured vt100: %q", j.Snapshot().Stdout.Text)
	}
	snap, err := e.WriteInput(ctx, j.ID(), []byte("ada\r"), false)
	if err != nil {
		t.Fatal(err)
	}
	if snap.Input == nil || snap.Input.Bytes != 4 || snap.Input.Writes != 1 || snap.Input.Text != "" || !snap.Input.Open {
		t.Errorf("Input = %+v, want 4 bytes in 1 write, no text (not configured), open", snap.Input)
	}
	waitOutput(t, j, "hello ada")
	if _, err := e.Resize(j.ID(), 123, 40); err != nil {
		t.Fatal(err)
	}
	waitOutput(t, j, "WINCH 123")
	if got := j.Snapshot().Terminal; got == nil || got.Cols != 123 || got.Rows != 40 {
		t.Errorf("Terminal after resize = %+v", got)
	}
	if _, err := e.Signal(j.ID(), "SIGINT"); err != nil {
		t.Fatal(err)
	}
	final, err := j.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(final.Stdout.Text, "TRAPPED") || final.ExitCode == nil || *final.ExitCode != 7 {
		t.Errorf("after SIGINT: exit %v, output %q; want the trap's exit 7", final.ExitCode, final.Stdout.Text)
	}
	// The job has ended: every control says so and changes nothing.
	if _, err := e.WriteInput(ctx, j.ID(), []byte("x"), false); !errors.Is(err, ErrJobEnded) {
		t.Errorf("write after the end: %v, want ErrJobEnded", err)
	}
	if _, err := e.Resize(j.ID(), 80, 24); !errors.Is(err, ErrJobEnded) {
		t.Errorf("resize after the end: %v, want ErrJobEnded", err)
	}
	if _, err := e.Signal(j.ID(), "SIGINT"); !errors.Is(err, ErrJobEnded) {
		t.Errorf("signal after the end: %v, want ErrJobEnded", err)
	}
	if got := j.Snapshot().Input; got.Bytes != 4 {
		t.Errorf("input bytes after refused writes = %d, want 4", got.Bytes)
	}
}

func TestOpenStdinPipe(t *testing.T) {
	e := newTestExecutor(t, func(o *Options) { o.RecordInput = true })
	ctx := testCtx(t)
	j, err := e.Start(ctx, Spec{Command: `while read -r l; do echo "got $l"; done; echo eof`, OpenStdin: true, Stdin: []byte("one\n"), HasStdin: true, Background: true})
	if err != nil {
		t.Fatal(err)
	}
	waitOutput(t, j, "got one")
	if _, err := e.WriteInput(ctx, j.ID(), []byte("two\n"), false); err != nil {
		t.Fatal(err)
	}
	waitOutput(t, j, "got two")
	snap, err := e.WriteInput(ctx, j.ID(), []byte("three\n"), true)
	if err != nil {
		t.Fatal(err)
	}
	if snap.Input.Text != "two\nthree\n" || !snap.Input.Closed || snap.Input.Open {
		t.Errorf("Input = %+v, want the recorded text, closed", snap.Input)
	}
	final, _ := j.Wait(ctx)
	if want := "got one\ngot two\ngot three\neof\n"; final.Stdout.Text != want {
		t.Errorf("stdout %q, want %q", final.Stdout.Text, want)
	}
	if final.Terminal != nil {
		t.Errorf("a pipe job has Terminal %+v", final.Terminal)
	}
}

func TestInputRefusals(t *testing.T) {
	e := newTestExecutor(t, nil)
	ctx := testCtx(t)
	plain, err := e.Start(ctx, Spec{Command: "sleep 5", Background: true})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Cancel(ctx, plain.ID())
	pipeJob, err := e.Start(ctx, Spec{Command: "sleep 5", Background: true, OpenStdin: true})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Cancel(ctx, pipeJob.ID())
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	tests := []struct {
		name string
		call func() error
		want error
	}{
		{"write to a job without open input", func() error { _, err := e.WriteInput(ctx, plain.ID(), []byte("x"), false); return err }, ErrInputNotOpen},
		{"resize a pipe job", func() error { _, err := e.Resize(pipeJob.ID(), 80, 24); return err }, ErrNotTerminal},
		{"size out of range", func() error { _, err := e.Resize(pipeJob.ID(), 0, 24); return err }, ErrInvalidInput},
		{"signal not allowed", func() error { _, err := e.Signal(plain.ID(), "SIGSEGV"); return err }, ErrSignalNotAllowed},
		{"unknown job", func() error { _, err := e.WriteInput(ctx, "job_nope", nil, true); return err }, ErrJobNotFound},
		// sleep never reads: the pipe takes 64 KiB, then the write blocks.
		{"program not reading", func() error {
			_, err := e.WriteInput(short, pipeJob.ID(), bytes.Repeat([]byte("x"), 1<<20), false)
			return err
		}, ErrInputBlocked},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.call(); !errors.Is(err, tt.want) {
				t.Errorf("err = %v, want %v", err, tt.want)
			}
		})
	}
	if in := plain.Snapshot().Input; in != nil {
		t.Errorf("a job without open input has an input record %+v", in)
	}
	if in := pipeJob.Snapshot().Input; in == nil || in.Bytes <= 0 || in.Bytes >= 1<<20 {
		t.Errorf("blocked write: input record %+v, want the bytes the pipe took", in)
	}
	if _, err := e.Start(ctx, Spec{Command: "true", Cols: 80}); !errors.Is(err, ErrInvalidInput) {
		t.Errorf("cols without tty: %v, want ErrInvalidInput", err)
	}
}

// TestTerminalContainment: a terminal job is contained like any job (in
// both modes, a grandchild that left the group dies with it) and runs in
// its sandbox, with the terminal still its controlling terminal.
func TestTerminalContainment(t *testing.T) {
	for _, mode := range []string{ContainmentAuto, ContainmentGroup} {
		t.Run("containment "+cmpOr(mode, "auto"), func(t *testing.T) {
			e := newTestExecutor(t, func(o *Options) { o.Containment = mode })
			ctx := testCtx(t)
			j, err := e.Start(ctx, Spec{Command: `setsid sleep 60 & echo $!; read x`, TTY: true, Background: true})
			if err != nil {
				t.Fatal(err)
			}
			out := waitOutput(t, j, "\n")
			pid := strings.TrimSpace(out)
			if _, err := e.Cancel(ctx, j.ID()); err != nil {
				t.Fatal(err)
			}
			waitGone(t, pid)
		})
	}
	t.Run("sandbox", func(t *testing.T) {
		host := sandbox.NewHost(testCtx(t), sandbox.Config{})
		pol := sandbox.Policy{FS: sandbox.ReadOnly, Network: sandbox.NetworkOn}
		if err := host.Check(pol); err != nil {
			testenv.Need(t, "this host cannot enforce read-only: %v", err)
		}
		e := newTestExecutor(t, func(o *Options) { o.Sandbox = host })
		snap := mustRun(t, e, Spec{Command: `[ -t 0 ] && echo tty; touch /nope 2>/dev/null || echo read-only; stty size`, TTY: true, Cols: 90, Rows: 20, Sandbox: pol, CwdIsRoot: true})
		if got := strings.ReplaceAll(snap.Stdout.Text, "\r\n", "\n"); got != "tty\nread-only\n20 90\n" {
			t.Errorf("sandboxed terminal job: %q", got)
		}
	})
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// waitGone waits until the process pid no longer exists.
func waitGone(tb testing.TB, pid string) {
	tb.Helper()
	deadline := time.Now().Add(testDeadline)
	for {
		if _, err := os.Stat("/proc/" + pid); err != nil {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("process %s outlived its job", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestEndedJobRefusals: once a job's leader has exited, writing, closing
// and resizing are ErrJobEnded whatever the job was (no input, a pipe
// closed or open, a terminal), never ErrInputNotOpen or ErrNotTerminal:
// those are for a running job only.
func TestEndedJobRefusals(t *testing.T) {
	t.Parallel()
	e := newTestExecutor(t, nil)
	ctx := testCtx(t)
	kinds := []struct {
		name string
		spec Spec
	}{
		{"no input", Spec{Command: "true"}},
		{"open pipe", Spec{Command: "true", OpenStdin: true}},
		{"terminal", Spec{Command: "true", TTY: true}},
	}
	for _, k := range kinds {
		j, err := e.Start(ctx, k.spec)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := j.Wait(ctx); err != nil {
			t.Fatal(err)
		}
		calls := map[string]func() error{
			"write":  func() error { _, err := e.WriteInput(ctx, j.ID(), []byte("x"), false); return err },
			"close":  func() error { _, err := e.WriteInput(ctx, j.ID(), nil, true); return err },
			"resize": func() error { _, err := e.Resize(j.ID(), 80, 24); return err },
		}
		for op, call := range calls {
			if err := call(); !errors.Is(err, ErrJobEnded) {
				t.Errorf("%s: %s after the end: %v, want ErrJobEnded", k.name, op, err)
			}
		}
	}

	// A running job whose pipe was closed: its input is not open.
	j, err := e.Start(ctx, Spec{Command: "sleep 5", Background: true, OpenStdin: true})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Cancel(ctx, j.ID())
	if _, err := e.WriteInput(ctx, j.ID(), nil, true); err != nil {
		t.Fatal(err)
	}
	if _, err := e.WriteInput(ctx, j.ID(), []byte("x"), false); !errors.Is(err, ErrInputNotOpen) {
		t.Errorf("write after close: %v, want ErrInputNotOpen", err)
	}
	if _, err := e.WriteInput(ctx, j.ID(), nil, true); !errors.Is(err, ErrInputNotOpen) {
		t.Errorf("close after close: %v, want ErrInputNotOpen", err)
	}
}
