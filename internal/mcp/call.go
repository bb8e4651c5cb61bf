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
		c := h.newCall(ctx, agentID)
		defer c.watch()()
		done := c.run(name, req, c.options(policy, req))
		var o callOutcome
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
		return c.answer(o)
	}
}

// call is one tools/call in flight: the job it started, and whether and
// why its client stopped it.
type call struct {
	h       *Handler
	ctx     context.Context // the request's
	agentID string
	// callCtx is the pipeline call's: the request's cancellation reaches
	// it only before a job exists (cancel).
	callCtx context.Context
	cancel  context.CancelFunc

	mu       sync.Mutex
	job      *exec.Job
	canceled bool
	stopped  string // why the call was stopped, for its result
	progress *progress
}

// callOutcome is what the pipeline answered.
type callOutcome struct {
	res run.CallResult
	err error
}

// newCall makes the call of agentID for the request whose context is ctx.
func (h *Handler) newCall(ctx context.Context, agentID string) *call {
	callCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	return &call{h: h, ctx: ctx, agentID: agentID, callCtx: callCtx, cancel: cancel}
}

// stop stops j through the executor's kill path.
func (c *call) stop(j *exec.Job) {
	sctx, cancel := context.WithTimeout(context.Background(), stopTimeout)
	defer cancel()
	if _, err := c.h.jobs.Cancel(sctx, j.ID()); err != nil && !errors.Is(err, exec.ErrJobNotFound) {
		c.h.log.Warn("stop the job of a cancelled MCP call", "agent_id", c.agentID, "job_id", j.ID(), "err", err)
	}
}

// watch stops the call when the request ends (the client cancelled, or
// the session ended): its job if it has one, else the call itself. The
// function it returns stops watching.
func (c *call) watch() func() bool {
	return context.AfterFunc(c.ctx, func() {
		why := run.StopCancelled
		if errors.Is(context.Cause(c.ctx), errSessionEnded) {
			why = run.StopSessionEnded
		}
		c.mu.Lock()
		c.canceled = true
		c.stopped = why
		j := c.job
		c.mu.Unlock()
		if j == nil {
			c.cancel()
			return
		}
		c.h.log.Debug("MCP call stopped: stopping its job", "agent_id", c.agentID, "job_id", j.ID(), "why", why)
		c.stop(j)
	})
}

// options are the pipeline's options for the call: told when its job
// starts (stopped at once if the client has left, else followed with
// progress notifications when the client asked for them), asked why it
// was stopped, and run under the tighter of the agent's policy and the one
// its client declares: never looser than the agent's.
func (c *call) options(policy sandbox.Policy, req *sdk.CallToolRequest) run.CallOptions {
	token := req.Params.GetProgressToken()
	opts := run.CallOptions{
		Started: func(j *exec.Job) {
			c.mu.Lock()
			c.job = j
			canceled := c.canceled
			c.mu.Unlock()
			if canceled {
				go c.stop(j) // the client left before the job existed
				return
			}
			if token != nil {
				c.progress = c.h.follow(c.ctx, req.Session, token, j)
			}
		},
		Stopped: func() string {
			c.mu.Lock()
			defer c.mu.Unlock()
			return c.stopped
		},
	}
	if declared, ok := declaredPolicy(req.Params.Meta); ok {
		opts.Sandbox = tighter(policy, declared)
	}
	return opts
}

// run runs the call through the pipeline on a goroutine of its own and
// delivers its outcome.
func (c *call) run(name string, req *sdk.CallToolRequest, opts run.CallOptions) <-chan callOutcome {
	done := make(chan callOutcome, 1)
	c.h.pending.Add(1)
	go func() {
		defer c.h.pending.Done()
		defer c.cancel()
		res, err := c.h.pipeline.CallWith(c.callCtx, c.agentID, name, "", req.Params.Arguments, opts)
		if c.progress != nil {
			c.progress.stop() // no notification may follow the result
		}
		if err != nil && c.ctx.Err() == nil && !errors.Is(err, shellenv.ErrResolution) && !errors.Is(err, agents.ErrNotFound) {
			c.h.log.Error("MCP tool call failed", "agent_id", c.agentID, "tool", name, "err", err)
		}
		done <- callOutcome{res, err}
	}()
	return done
}

// answer is the MCP result of the pipeline's outcome.
func (c *call) answer(o callOutcome) (*sdk.CallToolResult, error) {
	switch err := o.err; {
	case errors.Is(err, shellenv.ErrResolution):
		// The harness operator can act on it: tell the model, who can say so.
		// (Arguments the model got wrong are results of the pipeline's own.)
		return errorResult(err.Error()), nil
	case errors.Is(err, agents.ErrNotFound):
		return errorResult("this session's agent " + c.agentID + " no longer exists; start a new session"), nil
	case err != nil:
		if c.ctx.Err() != nil {
			return nil, context.Cause(c.ctx)
		}
		return errorResult("internal error; the server log has the cause"), nil
	}
	return &sdk.CallToolResult{
		Content: []sdk.Content{&sdk.TextContent{Text: o.res.Text}},
		IsError: o.res.IsError,
	}, nil
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
