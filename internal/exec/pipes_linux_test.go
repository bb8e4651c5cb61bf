package exec

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/dshd/dshd/internal/proc"
)

// readyPairs returns the output pipes ready in e's runner, once the filler
// has made proc.PipesWanted of them.
func readyPairs(t *testing.T, e *Executor) [][4]*os.File {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		ready := e.run.ReadyPipes()
		if len(ready) == proc.PipesWanted {
			return ready
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d output pipe pairs ready, want %d", len(ready), proc.PipesWanted)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func closed(f *os.File) bool {
	_, err := f.Stat()
	return errors.Is(err, os.ErrClosed)
}

// TestOutputPipesMadeAhead: after a spawn the runner makes output pipes
// ahead; commands that take them get their own output, each pair serves one
// command and is closed with it, and Close closes the pairs still waiting.
func TestOutputPipesMadeAhead(t *testing.T) {
	t.Parallel()
	e, err := New(Options{Home: t.TempDir(), Environ: testEnviron(), DefaultCwd: t.TempDir(), Grace: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	mustRun(t, e, Spec{Command: "true"}) // made its own pipes; the filler starts
	made := readyPairs(t, e)

	// More commands at once than pairs ready: the first take the pairs
	// ready, oldest first, the rest what the filler made meanwhile or
	// their own.
	const n = proc.PipesWanted + 3
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			s := mustRun(t, e, Spec{Command: fmt.Sprintf("echo out%d; echo err%d >&2; echo more%d", i, i, i)})
			if want := fmt.Sprintf("out%d\nmore%d\n", i, i); s.Stdout.Text != want {
				t.Errorf("command %d: stdout %q, want %q", i, s.Stdout.Text, want)
			}
			if want := fmt.Sprintf("err%d\n", i); s.Stderr.Text != want {
				t.Errorf("command %d: stderr %q, want %q", i, s.Stderr.Text, want)
			}
		})
	}
	wg.Wait()
	now := readyPairs(t, e)
	for _, p := range made {
		for _, q := range now {
			if p[0] == q[0] {
				t.Fatal("a pair made before the commands is still ready: none took it")
			}
		}
		// Taken by a command, which has ended: all four ends closed (our
		// read ends just after the command's end is signalled).
		deadline := time.Now().Add(5 * time.Second)
		for _, f := range p {
			for !closed(f) && time.Now().Before(deadline) {
				time.Sleep(time.Millisecond)
			}
			if !closed(f) {
				t.Errorf("%s of a pair a command took is still open after the command", f.Name())
			}
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), testDeadline)
	defer cancel()
	if err := e.Close(ctx); err != nil {
		t.Fatal(err)
	}
	for _, p := range now {
		for _, f := range p {
			if !closed(f) {
				t.Errorf("%s of a ready pair is open after Close", f.Name())
			}
		}
	}
}
