package run

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/dshd/dshd/internal/agents"
	"github.com/dshd/dshd/internal/exec"
	"github.com/dshd/dshd/internal/hooks"
	"github.com/dshd/dshd/internal/tools"
)

// writeStdinToolName is the tool name hooks see for write_stdin: the name
// of Codex's own tool, in both dialects (Claude Code has no tool that
// writes to a running process). Hooks matching "Bash" do not see it: its
// input has no command.
const writeStdinToolName = "write_stdin"

// Codex's defaults and bounds for its unified exec tools.
const (
	// ttyYield is how long a bash call with tty waits before it returns a
	// still-running job (Codex's exec_command default).
	ttyYield = 10 * time.Second
	// writeYield and pollYield are write_stdin's waits after a write and
	// when it only polls; maxYield bounds both.
	writeYield = 250 * time.Millisecond
	pollYield  = 5 * time.Second
	maxYield   = 30 * time.Second
	// defaultOutputTokens is max_output_tokens' default; a token counts as
	// bytesPerToken bytes.
	defaultOutputTokens = 10000
	bytesPerToken       = 4
)

// readCursors remembers, per job, how much of its output the model has
// read through a yielded bash call or write_stdin, so write_stdin returns
// only what is new.
type readCursors struct {
	mu sync.Mutex
	m  map[string][2]int64 // job id -> stdout, stderr offsets
}

// maxCursors bounds the table: past it, cursors of jobs no longer recorded
// are dropped.
const maxCursors = 1024

func (c *readCursors) get(id string) [2]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[id]
}

func (c *readCursors) set(id string, at [2]int64, exists func(string) bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = make(map[string][2]int64)
	}
	if len(c.m) >= maxCursors {
		for k := range c.m {
			if !exists(k) {
				delete(c.m, k)
			}
		}
	}
	c.m[id] = at
}

func (c *readCursors) drop(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m, id)
}

func (s *Service) jobExists(id string) bool {
	_, err := s.jobs.Job(id)
	return err == nil
}

// writeStdin runs write_stdin: for one of the agent's jobs, PreToolUse
// hooks, the write, a wait of yield_time_ms (or until the job ends), the
// output printed since the model's last read, PostToolUse hooks.
func (s *Service) writeStdin(ctx context.Context, agent agents.Agent, callID string, a tools.Args) (CallResult, error) {
	id := a.Str("session_id")
	job, ok, err := s.ownJob(id, agent.ID)
	if err != nil || !ok {
		return notFound(id), err
	}
	chars := a.Str("chars")
	hookCwd := agent.Cwd
	if hookCwd == "" {
		hookCwd = s.home
	}
	input := map[string]any{"session_id": id, "chars": chars}
	for _, k := range []string{"yield_time_ms", "max_output_tokens"} {
		if a.Has(k) {
			input[k] = a.Int(k)
		}
	}
	hookInput := func(ev hooks.EventName) hooks.Input {
		return hooks.Input{Event: ev, SessionID: agent.ID, Cwd: hookCwd, ToolName: writeStdinToolName, ToolUseID: callID, ToolInput: input}
	}
	pre, err := s.runHooks(ctx, callID, agent.ID, hookInput(hooks.PreToolUse))
	if err != nil {
		return CallResult{JobID: id}, err
	}
	if pre.Blocked {
		res := CallResult{JobID: id, IsError: true, Text: blockedText("PreToolUse", pre.Reason)}
		addHookOutput(&res, pre)
		return res, nil
	}

	res := CallResult{JobID: id}
	problem, err := s.writeAndWait(ctx, job, id, chars, stdinYield(a, chars))
	if err != nil {
		return res, err
	}
	budget := defaultOutputTokens
	if a.Has("max_output_tokens") {
		budget = int(min(a.Int("max_output_tokens"), 1<<30/bytesPerToken))
	}
	snap, newOut, newErr := s.readNew(job, budget*bytesPerToken)
	res.Text = tools.RenderResult(snap)
	if problem != "" {
		res.IsError = true
		res.Text = problem + "\n" + res.Text
	}
	if snap.State != exec.StateRunning {
		res.ExitCode = snap.ExitCode
	}
	addHookOutput(&res, pre)
	post := hookInput(hooks.PostToolUse)
	post.ToolResponse = map[string]any{"output": newOut, "stderr": newErr, "exitCode": snap.ExitCode, "running": snap.State == exec.StateRunning}
	out, err := s.runHooks(ctx, callID, agent.ID, post)
	if err != nil {
		s.log.Warn("PostToolUse hooks failed", "agent_id", agent.ID, "call_id", callID, "job_id", id, "err", err)
		return res, nil
	}
	if out.Blocked {
		res.IsError = true
		res.Text += "\n" + blockedText("PostToolUse", out.Reason)
	}
	addHookOutput(&res, out)
	return res, nil
}

// stdinYield is how long write_stdin waits after its write: yield_time_ms,
// else a short wait after a write and a longer one for a poll, at most
// maxYield.
func stdinYield(a tools.Args, chars string) time.Duration {
	yield := pollYield
	if chars != "" {
		yield = writeYield
	}
	if a.Has("yield_time_ms") {
		yield = time.Duration(a.Int("yield_time_ms")) * time.Millisecond
	}
	return min(yield, maxYield)
}

// writeAndWait writes chars (if any) to the input of job (id), then waits yield, or
// until the job ends or the caller leaves. A write refused for a reason
// the model can act on is returned as the problem to print (and then
// there is no wait); any other failure is the error.
func (s *Service) writeAndWait(ctx context.Context, job *exec.Job, id, chars string, yield time.Duration) (problem string, err error) {
	if chars != "" {
		wctx, cancel := context.WithTimeout(ctx, max(yield, time.Second))
		_, werr := s.jobs.WriteInput(wctx, id, []byte(chars), false)
		cancel()
		switch {
		case errors.Is(werr, exec.ErrInputNotOpen):
			problem = fmt.Sprintf("[job %s takes no input: start the command with tty to write to it]", id)
		case errors.Is(werr, exec.ErrJobEnded):
			problem = fmt.Sprintf("[job %s has ended: nothing was written]", id)
		case errors.Is(werr, exec.ErrInputBlocked):
			problem = "[the program is not reading its input: " + werr.Error() + "]"
		case werr != nil:
			return "", werr
		}
	}
	if problem == "" && yield > 0 {
		t := time.NewTimer(yield)
		select {
		case <-job.Done():
		case <-t.C:
		case <-ctx.Done(): // the caller left: the output as it is now
		}
		t.Stop()
	}
	return problem, nil
}

// readNew returns job's snapshot with its output replaced by what was
// printed since the model's last read (at most limit bytes per stream,
// head and tail kept around an elision line, Truncated set then), the new
// stdout and stderr, and moves the read cursor to the end. Once the job
// has ended its cursor is forgotten.
func (s *Service) readNew(job *exec.Job, limit int) (exec.Snapshot, string, string) {
	snap := job.Snapshot()
	from := s.cursors.get(job.ID())
	to := [2]int64{snap.Stdout.TotalBytes, snap.Stderr.TotalBytes}
	var texts [2]string
	var cut [2]bool
	var elided [2][2]int64
	for i, st := range []exec.Stream{exec.Stdout, exec.Stderr} {
		texts[i], cut[i], elided[i] = readRange(job, st, from[i], to[i], limit)
	}
	snap.Stdout.Text, snap.Stdout.Truncated = texts[0], cut[0]
	snap.Stdout.ElidedFrom, snap.Stdout.ElidedTo = elided[0][0], elided[0][1]
	snap.Stderr.Text, snap.Stderr.Truncated = texts[1], cut[1]
	snap.Stderr.ElidedFrom, snap.Stderr.ElidedTo = elided[1][0], elided[1][1]
	if snap.State == exec.StateRunning {
		s.cursors.set(job.ID(), to, s.jobExists)
	} else {
		s.cursors.drop(job.ID())
	}
	return snap, texts[0], texts[1]
}

// readRange reads stream st of job from byte from to byte to: the whole
// range when it fits in limit bytes, else its first and last limit/2 bytes
// (cut at character boundaries) around a line saying how many were left
// out; the flag says whether bytes were left out, and the range which.
func readRange(job *exec.Job, st exec.Stream, from, to int64, limit int) (string, bool, [2]int64) {
	n := to - from
	if n <= 0 {
		return "", false, [2]int64{}
	}
	if n <= int64(limit) {
		return string(readAt(job, st, from, int(n))), false, [2]int64{}
	}
	head := readAt(job, st, from, limit/2)
	tail := readAt(job, st, to-int64(limit/2), limit/2)
	if i := lastRuneStart(head); i >= 0 && !utf8.FullRune(head[i:]) {
		head = head[:i]
	}
	for k := 0; k < utf8.UTFMax-1 && len(tail) > 0 && !utf8.RuneStart(tail[0]); k++ {
		tail = tail[1:]
	}
	elided := n - int64(len(head)) - int64(len(tail))
	return string(head) + "\n…[" + strconv.FormatInt(elided, 10) + " bytes elided]…\n" + string(tail), true,
		[2]int64{from + int64(len(head)), to - int64(len(tail))}
}

// readAt reads up to n bytes of stream st from off; fewer when the rest is
// not readable (dropped by the spool limits).
func readAt(job *exec.Job, st exec.Stream, off int64, n int) []byte {
	buf := make([]byte, n)
	got := 0
	for got < n {
		k, err := job.ReadOutput(st, off+int64(got), buf[got:])
		got += k
		if err != nil || k == 0 {
			break
		}
	}
	return buf[:got]
}

// lastRuneStart returns the index of the start of the last (possibly
// incomplete) character in b, looking back at most UTFMax bytes, or -1.
func lastRuneStart(b []byte) int {
	for i := len(b) - 1; i >= 0 && i >= len(b)-utf8.UTFMax; i-- {
		if utf8.RuneStart(b[i]) {
			return i
		}
	}
	return -1
}
