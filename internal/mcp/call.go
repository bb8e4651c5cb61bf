package mcp

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/dshd/dshd/internal/agents"
	"github.com/dshd/dshd/internal/exec"
	"github.com/dshd/dshd/internal/run"
	"github.com/dshd/dshd/internal/sandbox"
	"github.com/dshd/dshd/internal/shellenv"
)

// stopTimeout bounds how long a cancelled call waits for its job to stop
// before answering anyway; the executor's kill path goes on regardless.
const stopTimeout = 30 * time.Second

// toolHandler runs one tool for agentID through the pipeline.
//
// The pipeline call runs under a context the MCP request's cancellation
// does not reach directly: when the client cancels (or the session ends),
// a started foreground job is stopped through the executor's kill path,
// and the call then ends the way any stopped job ends — rendered, with
// PostToolUse hooks, recorded in the transcript with why it was stopped.
// Before a job exists the call itself is cancelled; a job that starts
// after that (the cancellation raced its start) is stopped at once, and
// the call records how it ended. When the client cancels or the session
// ends (DELETE /mcp) the handler returns at once, as no answer goes to the
// client, so that the session can close without waiting; the call ends
// and is recorded on its own.
// policy is the agent's sandbox policy, which a client's declared sandbox
// mode can only tighten.
func (h *Handler) toolHandler(agent *sessionAgent, policy sandbox.Policy, name string) sdk.ToolHandler {
	return func(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
		ctx, end := context.WithCancelCause(ctx)
		defer end(nil)
		leave, ok := h.enter(req.Session.ID(), end)
		if !ok {
			return nil, errSessionEnded
		}
		defer leave()
		// The call has been accepted: its answer starts now, whatever the
		// command prints and whether or not the client asked for progress.
		stream := h.streamOf(req)
		if stream != nil {
			defer stream.handled.Store(true)
			defer stream.open(h.keepAlive)()
		}
		agentID, err := agent.get(ctx, req.Session)
		if err != nil {
			if ctx.Err() != nil {
				return nil, context.Cause(ctx)
			}
			h.log.Error("make the agent of an MCP session", "err", err)
			return errorResult("internal error: this session's agent could not be made; the server log has the cause"), nil
		}
		callCtx, cancelCall := context.WithCancel(context.WithoutCancel(ctx))

		var (
			mu       sync.Mutex
			job      *exec.Job
			canceled bool
			stopped  string // why the call was stopped, for its result
			progress *progress
		)
		stop := func(j *exec.Job) {
			sctx, cancel := context.WithTimeout(context.Background(), stopTimeout)
			defer cancel()
			if _, err := h.jobs.Cancel(sctx, j.ID()); err != nil && !errors.Is(err, exec.ErrJobNotFound) {
				h.log.Warn("stop the job of a cancelled MCP call", "agent_id", agentID, "job_id", j.ID(), "err", err)
			}
		}
		unwatch := context.AfterFunc(ctx, func() {
			why := run.StopCancelled
			if errors.Is(context.Cause(ctx), errSessionEnded) {
				why = run.StopSessionEnded
			}
			mu.Lock()
			canceled = true
			stopped = why
			j := job
			mu.Unlock()
			if j == nil {
				cancelCall()
				return
			}
			h.log.Debug("MCP call stopped: stopping its job", "agent_id", agentID, "job_id", j.ID(), "why", why)
			stop(j)
		})
		defer unwatch()

		token := req.Params.GetProgressToken()
		started := func(j *exec.Job) {
			mu.Lock()
			job = j
			c := canceled
			mu.Unlock()
			if c {
				go stop(j) // the client left before the job existed
				return
			}
			if token != nil {
				progress = h.follow(ctx, req.Session, token, j)
			}
		}

		opts := run.CallOptions{Started: started, Stopped: func() string {
			mu.Lock()
			defer mu.Unlock()
			return stopped
		}}
		if declared, ok := declaredPolicy(req.Params.Meta); ok {
			// The call runs under the tighter of the agent's policy and the
			// one its client declares: never looser than the agent's.
			opts.Sandbox = tighter(policy, declared)
		}
		type outcome struct {
			res run.CallResult
			err error
		}
		done := make(chan outcome, 1)
		h.pending.Add(1)
		go func() {
			defer h.pending.Done()
			defer cancelCall()
			res, err := h.pipeline.CallWith(callCtx, agentID, name, "", req.Params.Arguments, opts)
			if progress != nil {
				progress.stop() // no notification may follow the result
			}
			if err != nil && ctx.Err() == nil && !errors.Is(err, shellenv.ErrResolution) && !errors.Is(err, agents.ErrNotFound) {
				h.log.Error("MCP tool call failed", "agent_id", agentID, "tool", name, "err", err)
			}
			done <- outcome{res, err}
		}()
		var o outcome
		select {
		case o = <-done:
		case <-ctx.Done():
			// No answer goes to the client: a cancelled request gets none
			// (see wire.go), nor does a call of an ended session, whose
			// stream ends (the SDK may not know yet that the session is
			// closing). Return now, so the session can close without
			// waiting.
			if stream != nil {
				stream.cancelled.Store(true)
			}
			return nil, context.Cause(ctx)
		}
		res, err := o.res, o.err
		switch {
		case errors.Is(err, shellenv.ErrResolution):
			// The harness operator can act on it: tell the model, who can say so.
			// (Arguments the model got wrong are results of the pipeline's own.)
			return errorResult(err.Error()), nil
		case errors.Is(err, agents.ErrNotFound):
			return errorResult("this session's agent " + agentID + " no longer exists; start a new session"), nil
		case err != nil:
			if ctx.Err() != nil {
				return nil, context.Cause(ctx)
			}
			return errorResult("internal error; the server log has the cause"), nil
		}
		return &sdk.CallToolResult{
			Content: []sdk.Content{&sdk.TextContent{Text: res.Text}},
			IsError: res.IsError,
		}, nil
	}
}

func errorResult(text string) *sdk.CallToolResult {
	return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: text}}, IsError: true}
}

// progress follows one job's output and sends it as progress notifications.
type progress struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// stop ends the follower and waits for it.
func (p *progress) stop() {
	p.cancel()
	<-p.done
}

// follow starts sending j's output as it arrives as progress notifications
// for token: each carries the new stdout (and "[stderr]" and the new
// stderr) as its message, at most h.progressBytes of each stream, at most
// one per h.progressEvery, and the number of output bytes reported so far
// as its progress, which therefore always grows. No total is given.
func (h *Handler) follow(ctx context.Context, session *sdk.ServerSession, token any, j *exec.Job) *progress {
	ctx, cancel := context.WithCancel(ctx)
	p := &progress{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(p.done)
		var (
			off  [2]int64 // stdout, stderr
			buf  = make([]byte, h.progressBytes)
			last time.Time
		)
		for {
			changed := j.OutputChanged()
			select {
			case <-j.Done():
				return // the result carries the whole output
			default:
			}
			var msg strings.Builder
			for i, s := range []exec.Stream{exec.Stdout, exec.Stderr} {
				n, err := j.ReadOutput(s, off[i], buf)
				if err != nil || n == 0 {
					continue
				}
				// Hold back a rune split across reads; it comes whole next time.
				chunk := buf[:completeRunes(buf[:n])]
				if len(chunk) == 0 {
					continue
				}
				off[i] += int64(len(chunk))
				if s == exec.Stderr {
					if msg.Len() > 0 && !strings.HasSuffix(msg.String(), "\n") {
						msg.WriteByte('\n')
					}
					msg.WriteString("[stderr]\n")
				}
				msg.WriteString(strings.ToValidUTF8(string(chunk), "\uFFFD"))
			}
			if msg.Len() > 0 {
				err := session.NotifyProgress(ctx, &sdk.ProgressNotificationParams{
					ProgressToken: token,
					Progress:      float64(off[0] + off[1]),
					Message:       msg.String(),
				})
				if err != nil {
					if ctx.Err() == nil {
						h.log.Debug("send MCP progress", "job_id", j.ID(), "err", err)
					}
					return
				}
				last = time.Now()
				changed = nil // more may be waiting already: look again after the interval
			}
			if changed != nil {
				select {
				case <-ctx.Done():
					return
				case <-changed:
				}
			}
			// Batch what arrives within the interval into one notification.
			if wait := h.progressEvery - time.Since(last); wait > 0 {
				t := time.NewTimer(wait)
				select {
				case <-ctx.Done():
					t.Stop()
					return
				case <-t.C:
				}
			}
		}
	}()
	return p
}

// completeRunes returns the length of b without a trailing incomplete UTF-8
// sequence (at most 3 bytes are held back).
func completeRunes(b []byte) int {
	for i := len(b) - 1; i >= 0 && i >= len(b)-utf8.UTFMax; i-- {
		if utf8.RuneStart(b[i]) {
			if !utf8.FullRune(b[i:]) {
				return i
			}
			break
		}
	}
	return len(b)
}
