package run

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/dshd/dshd/internal/agents"
	"github.com/dshd/dshd/internal/exec"
	"github.com/dshd/dshd/internal/hooks"
	"github.com/dshd/dshd/internal/netallow"
	"github.com/dshd/dshd/internal/sandbox"
	"github.com/dshd/dshd/internal/tools"
)

// hookToolName is the tool name hooks see for bash, as in Claude Code and
// Codex, so that existing matchers ("Bash") apply unchanged.
const hookToolName = "Bash"

// maxWait bounds job_output's waitMs so one call cannot hold a request
// open indefinitely.
const maxWait = 10 * time.Minute

// CallResult is the result of one model tool call, as returned to the
// harness and recorded in the agent's transcript.
type CallResult struct {
	CallID  string
	IsError bool
	Text    string
	// JobID is the job a bash call ran or started, or the job a job_* call
	// addressed; "" otherwise.
	JobID string
	// ExitCode is the exit code of a finished job; nil while it runs and when
	// it was killed by a signal.
	ExitCode *int
	// Sandbox is the sandbox policy a bash call's job ran under; nil when no
	// job ran.
	Sandbox *sandbox.Policy
	// Network is what a bash call's job reached and was refused through
	// the network allowlist's proxy (by the time the call returned); nil
	// unless it ran under the allowlist.
	Network *netallow.Record
	// AdditionalContext is the additionalContext the PreToolUse and
	// PostToolUse hooks offered the model, in configuration order, then
	// the SessionStart context no earlier result of the agent carried (the
	// first result after a session starts carries it). Text carries it too.
	AdditionalContext []string
	// SystemMessages are the hooks' systemMessage values, in configuration
	// order. Text carries each one too, except where it already is the
	// reason of a block.
	SystemMessages []string
}

// Call runs one model tool call for the agent agentID and records it in the
// agent's transcript: tool/call {callId, name, arguments, ignored} first,
// then hook/invoked and hook/result for each hook that ran, then
// tool/result {callId, isError, text, jobId?, exitCode?}. An empty callID is
// replaced by a generated "call_…" id. args is the arguments object exactly
// as the model sent it.
//
// Arguments other than the tool's declared ones — env and stdin included —
// are ignored (never reaching the child) and listed as ignored. bash runs
// through the same pipeline as Exec, with the agent's identity, no explicit
// environment and no stdin, after PreToolUse hooks; a blocking hook starts no
// process and makes the result an error carrying its reason. Foreground calls
// wait for the job; background calls answer "started background job <id>".
// PostToolUse hooks then see the response; a block there marks the result an
// error. The job_* tools see only the agent's own jobs.
//
// args may also be a JSON string holding the arguments object, as OpenAI's
// APIs deliver it; the object is what is recorded then.
//
// Problems the model can act on (arguments that break the tool's schema or
// rules, a blocked call, a workdir that does not exist, too many background
// jobs, a job that is not found) are results with IsError set, recorded like
// any other, not errors. Call returns errors wrapping: agents.ErrNotFound
// for an unknown agent, tools.ErrUnknownTool (nothing is recorded for these
// two), shellenv.ErrResolution when the managed environment could not be
// collected, and exec or context errors. Once the call is recorded, such a
// failure is recorded too, as an error result.
func (s *Service) Call(ctx context.Context, agentID, name, callID string, args json.RawMessage) (CallResult, error) {
	return s.CallWith(ctx, agentID, name, callID, args, CallOptions{})
}

// CallOptions are the optional parts of a tool call.
type CallOptions struct {
	// Started, when set, is called with the job of a foreground bash call
	// as soon as it has started, before the call waits for it, so that the
	// caller can follow its output as it arrives or stop it. It runs on the
	// calling goroutine and must not block.
	Started func(job *exec.Job)
	// Sandbox, when set, is the sandbox policy of the command a bash call
	// starts: empty fields take the agent's, and it must be within the
	// agent's (sandbox.ErrLooser). An MCP client's declared sandbox mode
	// tightens a call this way.
	Sandbox sandbox.Policy
	// Stopped, when set, is asked as the call's result is recorded why the
	// caller stopped the call ("" if it did not); the answer is recorded
	// as the result's stopped (StopCancelled, StopSessionEnded).
	Stopped func() string
}

// Why a caller stopped a call, as its tool/result records it.
const (
	// StopCancelled: the client cancelled the request (MCP
	// notifications/cancelled).
	StopCancelled = "cancelled"
	// StopSessionEnded: the MCP session ended while the call ran
	// (DELETE /mcp).
	StopSessionEnded = "session_ended"
)

// callWith runs a call for CallWith: it records the call, runs the tool
// and records its result.
func (s *Service) callWith(ctx context.Context, agentID, name, callID string, args json.RawMessage, o CallOptions) (CallResult, error) {
	agent, a, argErr, err := s.openCall(ctx, agentID, name, callID, args)
	if err != nil {
		return CallResult{}, err
	}
	var res CallResult
	if argErr != nil {
		// The model's mistake: tell it, so it can correct the call.
		res = CallResult{IsError: true, Text: argErr.Error()}
	} else {
		res, err = s.dispatch(ctx, agent, name, callID, a, o)
	}
	return s.closeCall(ctx, agentID, name, callID, res, err, o)
}

// openCall finds the agent and the tool, parses the arguments (argErr is
// the model's mistake, if any) and records the tool/call event, after any
// result that ran but could not be written before (cluster mode).
func (s *Service) openCall(ctx context.Context, agentID, name, callID string, args json.RawMessage) (agent agents.Agent, a tools.Args, argErr, err error) {
	agent, err = s.agents.Get(ctx, agentID)
	if err != nil {
		return agent, a, nil, fmt.Errorf("tool call %s: %w", name, err) // the store's error names the agent
	}
	if !tools.Known(name) {
		return agent, a, nil, fmt.Errorf("%w %q", tools.ErrUnknownTool, name)
	}
	args = tools.Unwrap(args) // a string holding the object, as OpenAI sends it
	a, argErr = tools.ParseArgs(name, args)
	if err := s.writeUnsaved(ctx, agentID); err != nil {
		return agent, a, nil, fmt.Errorf("record earlier results for agent %s: %w", agentID, err)
	}
	// The call's line is made durable with its result's (CommitLater).
	if err := s.record(agents.CommitLater(ctx), agentID, agents.EventToolCall, callEvent{CallID: callID, Name: name, Arguments: recordable(args), Ignored: a.Ignored()}); err != nil {
		return agent, a, nil, err
	}
	s.ledger.recorded(agentID, callID)
	return agent, a, argErr, nil
}

// dispatch runs the tool name with well-formed arguments.
func (s *Service) dispatch(ctx context.Context, agent agents.Agent, name, callID string, a tools.Args, o CallOptions) (CallResult, error) {
	switch name {
	case tools.ToolBash:
		return s.bash(ctx, agent, callID, a, o)
	case tools.ToolJobOutput:
		return s.jobOutput(ctx, agent.ID, a)
	case tools.ToolJobList:
		return s.jobList(agent.ID, a), nil
	case tools.ToolJobKill:
		return s.jobKill(ctx, agent.ID, a)
	case tools.ToolWriteStdin:
		return s.writeStdin(ctx, agent, callID, a)
	case tools.ToolReadFile, tools.ToolWriteFile, tools.ToolEditFile, tools.ToolApplyPatch:
		return s.fileTool(ctx, agent, callID, name, a, o)
	}
	return CallResult{}, fmt.Errorf("%w %q", tools.ErrUnknownTool, name) // tools.Known said otherwise
}

// closeCall records the result of a call that ran (res, or err turned into
// an error result), checkpoints the agent's view after it, and answers.
// The job may have run even if the caller has gone away: its end is
// recorded regardless, so every recorded call has its result.
func (s *Service) closeCall(ctx context.Context, agentID, name, callID string, res CallResult, err error, o CallOptions) (CallResult, error) {
	res.CallID = callID
	var sessionCtx []string
	if err == nil {
		sessionCtx = s.held.take(agentID)
		addContext(&res, sessionCtx)
	}
	outcome := "ok"
	switch {
	case err != nil:
		res = CallResult{CallID: callID, IsError: true, Text: "error: " + err.Error(), JobID: res.JobID,
			AdditionalContext: res.AdditionalContext, SystemMessages: res.SystemMessages}
		outcome = "failed"
	case res.IsError:
		outcome = "error"
	}
	s.calls.WithLabelValues(name, outcome).Inc()
	result := resultEvent{
		CallID: res.CallID, IsError: res.IsError, Text: res.Text, JobID: res.JobID, ExitCode: res.ExitCode, Sandbox: res.Sandbox, Network: toNetworkEvent(res.Network),
		AdditionalContext: res.AdditionalContext, SystemMessages: res.SystemMessages,
	}
	if o.Stopped != nil {
		result.Stopped = o.Stopped()
	}
	ev, rerr := s.agents.Append(context.WithoutCancel(ctx), agentID, agents.EventToolResult, result)
	if rerr != nil {
		rerr = fmt.Errorf("record %s for agent %s: %w", agents.EventToolResult, agentID, rerr)
	} else {
		// The call is over: its changes to a snapshot view are a
		// checkpoint before the caller hears of it.
		s.checkpoint(agentID, callID, ev.Seq)
	}
	if rerr != nil {
		switch {
		case storeDown(rerr):
			// The call ran: its caller gets its result, and the transcript
			// gets it once the store is back (not an interrupted one).
			s.keepUnsaved(agentID, callID, result)
		case err == nil:
			err = rerr
			s.held.giveBack(agentID, sessionCtx) // the model never sees this result
		}
	}
	if err != nil {
		return CallResult{}, err
	}
	return res, nil
}

// recordable is args as a tool/call event records them: {} for none, the
// object as sent, else a JSON string: the string sent, or the text of
// whatever else was.
func recordable(args json.RawMessage) json.RawMessage {
	t := bytes.TrimSpace(args)
	switch {
	case len(t) == 0 || bytes.Equal(t, []byte("null")):
		return json.RawMessage("{}")
	case t[0] == '{' && json.Valid(t):
		return json.RawMessage(t)
	case t[0] == '"' && json.Valid(t):
		return json.RawMessage(t)
	}
	b, _ := json.Marshal(strings.ToValidUTF8(string(t), "\uFFFD"))
	return b
}

// callEvent is the data of a tool/call transcript event.
type callEvent struct {
	CallID    string          `json:"callId"`
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments"`
	Ignored   []string        `json:"ignored"`
}

// resultEvent is the data of a tool/result transcript event.
type resultEvent struct {
	CallID   string `json:"callId"`
	IsError  bool   `json:"isError"`
	Text     string `json:"text"`
	JobID    string `json:"jobId,omitempty"`
	ExitCode *int   `json:"exitCode,omitempty"`
	// Sandbox is the policy the call's job ran under (bash calls that ran).
	Sandbox *sandbox.Policy `json:"sandbox,omitempty"`
	// Network is what the job reached and was refused through the
	// allowlist's proxy.
	Network *networkEvent `json:"network,omitempty"`
	// AdditionalContext and SystemMessages are what the hooks said (see
	// CallResult).
	AdditionalContext []string `json:"additionalContext,omitempty"`
	SystemMessages    []string `json:"systemMessages,omitempty"`
	// Stopped says why the caller stopped the call (CallOptions.Stopped).
	Stopped string `json:"stopped,omitempty"`
}

// networkEvent is a netallow.Record in a transcript (the contract's
// NetworkRecord).
type networkEvent struct {
	Reached []hostCountEvent `json:"reached"`
	Refused []hostCountEvent `json:"refused"`
}

type hostCountEvent struct {
	Host   string `json:"host"`
	Count  int    `json:"count"`
	Reason string `json:"reason,omitempty"`
}

func toNetworkEvent(r *netallow.Record) *networkEvent {
	if r == nil {
		return nil
	}
	conv := func(hs []netallow.HostCount) []hostCountEvent {
		out := make([]hostCountEvent, len(hs))
		for i, h := range hs {
			out[i] = hostCountEvent{Host: h.Host, Count: h.Count, Reason: h.Reason}
		}
		return out
	}
	return &networkEvent{Reached: conv(r.Reached), Refused: conv(r.Refused)}
}

func (n *networkEvent) record() *netallow.Record {
	if n == nil {
		return nil
	}
	conv := func(hs []hostCountEvent) []netallow.HostCount {
		out := make([]netallow.HostCount, len(hs))
		for i, h := range hs {
			out[i] = netallow.HostCount{Host: h.Host, Count: h.Count, Reason: h.Reason}
		}
		return out
	}
	return &netallow.Record{Reached: conv(n.Reached), Refused: conv(n.Refused)}
}

// hookInvokedEvent is the data of a hook/invoked transcript event.
type hookInvokedEvent struct {
	CallID  string `json:"callId"`
	Event   string `json:"event"`
	Handler string `json:"handler"`
	Dialect string `json:"dialect"`
}

// hookResultEvent is the data of a hook/result transcript event.
type hookResultEvent struct {
	CallID     string `json:"callId"`
	Event      string `json:"event"`
	Handler    string `json:"handler"`
	Dialect    string `json:"dialect"`
	Decision   string `json:"decision"`
	Reason     string `json:"reason,omitempty"`
	ExitCode   *int   `json:"exitCode"`
	Signal     string `json:"signal,omitempty"`
	TimedOut   bool   `json:"timedOut,omitempty"`
	Stderr     string `json:"stderr,omitempty"`
	Error      string `json:"error,omitempty"`
	DurationMs int64  `json:"durationMs"`
	// SystemMessage and AdditionalContext are the hook's own, as it printed
	// them.
	SystemMessage     string `json:"systemMessage,omitempty"`
	AdditionalContext string `json:"additionalContext,omitempty"`
}

func (s *Service) record(ctx context.Context, agentID, typ string, data any) error {
	if _, err := s.agents.Append(ctx, agentID, typ, data); err != nil {
		return fmt.Errorf("record %s for agent %s: %w", typ, agentID, err)
	}
	return nil
}

// bash runs the bash tool: PreToolUse hooks, the shared pipeline, waiting
// (foreground), PostToolUse hooks.
func (s *Service) bash(ctx context.Context, agent agents.Agent, callID string, a tools.Args, o CallOptions) (CallResult, error) {
	spec, yield := bashSpec(agent, a, o)
	hc := s.hookCall(agent, callID, hookToolName, bashHookInput(a))
	var preOut hooks.Outcome
	pre := func(ctx context.Context) (string, bool, error) {
		var err error
		preOut, err = hc.run(ctx, hooks.PreToolUse, nil)
		return preOut.Reason, preOut.Blocked, err
	}
	job, err := s.start(ctx, &agent, spec, pre)
	if err != nil {
		res, ok := startProblem(err)
		if !ok {
			return CallResult{}, err
		}
		if errors.As(err, new(*errBlocked)) {
			addHookOutput(&res, preOut)
		}
		return res, nil
	}

	// The job runs whether or not the caller stays (a harness's HTTP client
	// may go away; an MCP cancellation stops the job through its own path):
	// what follows is the job's real result, and the transcript records it.
	ctx = context.WithoutCancel(ctx)
	res, response := s.bashResult(ctx, job, o.Started, yield)
	pol := job.Sandbox()
	res.Sandbox = &pol
	res.Network = job.Network()
	addHookOutput(&res, preOut)
	hc.after(ctx, &res, response)
	return res, nil
}

// bashSpec is the job a bash call asks for, and its yield time: a
// foreground call returns a still-running job after it (Codex's
// behaviour); without one, and without tty, it waits for the end.
func bashSpec(agent agents.Agent, a tools.Args, o CallOptions) (exec.Spec, time.Duration) {
	spec := exec.Spec{
		Sandbox:    o.Sandbox,
		Command:    a.Str("command"),
		Cwd:        workdir(agent.Cwd, a.Str("workdir")),
		Timeout:    time.Duration(a.Int("timeout")) * time.Millisecond,
		Background: a.Bool("run_in_background"),
		TTY:        a.Bool("tty"),
		Cols:       int(min(a.Int("cols"), exec.MaxTerminalSize+1)),
		Rows:       int(min(a.Int("rows"), exec.MaxTerminalSize+1)),
	}
	var yield time.Duration
	if spec.TTY {
		yield = ttyYield
	}
	if a.Has("yield_time_ms") {
		yield = time.Duration(a.Int("yield_time_ms")) * time.Millisecond
	}
	// A call that may return while its job runs on holds one of the agent's
	// background slots, as run_in_background does.
	spec.MayOutlive = !spec.Background && yield > 0
	return spec, yield
}

// startProblem is the error result of a bash call whose job did not start
// for a reason the model can act on (a hook's block, too many jobs, a bad
// workdir, …); ok is false for a failure of dshd's own.
func startProblem(err error) (res CallResult, ok bool) {
	var (
		blocked *errBlocked
		tooMany *exec.TooManyJobsError
	)
	switch {
	case errors.As(err, &blocked):
		return CallResult{IsError: true, Text: blockedText("PreToolUse", blocked.reason)}, true
	case errors.As(err, &tooMany) && tooMany.Limit == "agent":
		return CallResult{IsError: true, Text: fmt.Sprintf("could not start the command: too many jobs: %d of your jobs already run on their own "+
			"(run_in_background, or still running after yield_time_ms or tty), the most allowed; wait for one to end "+
			"(job_output with waitMs) or stop one (job_kill), then try again; job_list lists them", tooMany.Max)}, true
	case errors.Is(err, exec.ErrInvalidCwd), errors.Is(err, exec.ErrInvalidInput), errors.Is(err, exec.ErrTooManyJobs),
		errors.Is(err, exec.ErrTooLarge), errors.Is(err, exec.ErrTimeoutTooLong), errors.Is(err, sandbox.ErrUnavailable):
		// The model can fix these itself: tell it rather than fail the request.
		return CallResult{IsError: true, Text: "could not start the command: " + err.Error()}, true
	}
	return CallResult{}, false
}

// hookCall is one tool call as hooks see it: the vendor's tool name (and
// the matcher aliases that also select it) and input.
type hookCall struct {
	s       *Service
	agent   agents.Agent
	callID  string
	name    string
	aliases []string
	input   map[string]any
}

// hookCall makes the hooks' view of agent's call callID.
func (s *Service) hookCall(agent agents.Agent, callID, name string, input map[string]any, aliases ...string) *hookCall {
	return &hookCall{s: s, agent: agent, callID: callID, name: name, aliases: aliases, input: input}
}

// run fires ev for the call (response: the tool's, for PostToolUse). Hooks
// run in the agent's cwd (docs/design.md#hooks-and-model-tools), never in
// a workdir the model asked for: a project's hooks are found relative to
// it (often via CLAUDE_PROJECT_DIR), and a hook that cannot be found does
// not block.
func (h *hookCall) run(ctx context.Context, ev hooks.EventName, response any) (hooks.Outcome, error) {
	cwd := h.agent.Cwd
	if cwd == "" {
		cwd = h.s.home
	}
	in := hooks.Input{Event: ev, SessionID: h.agent.ID, Cwd: cwd, ToolName: h.name, MatcherAliases: h.aliases,
		ToolUseID: h.callID, ToolInput: h.input, ToolResponse: response}
	return h.s.runHooks(ctx, h.callID, h.agent.ID, in)
}

// after runs the PostToolUse hooks of a call that ran, with its response,
// and carries what they said into res: a block marks it an error. A
// failure to run them is logged: the call's result matters more.
func (h *hookCall) after(ctx context.Context, res *CallResult, response any) {
	out, err := h.run(ctx, hooks.PostToolUse, response)
	if err != nil {
		h.s.log.Warn("PostToolUse hooks failed", "agent_id", h.agent.ID, "call_id", h.callID, "tool", h.name, "job_id", res.JobID, "err", err)
		return
	}
	if out.Blocked {
		res.IsError = true
		res.Text += "\n" + blockedText("PostToolUse", out.Reason)
	}
	addHookOutput(res, out)
}

// workdir is where a bash call asking for wd runs: the agent's cwd for "",
// wd itself when absolute (or when the agent has no cwd), else wd under the
// agent's cwd. The job table resolves what is still relative.
func workdir(agentCwd, wd string) string {
	switch {
	case wd == "":
		return agentCwd
	case filepath.IsAbs(wd) || agentCwd == "":
		return filepath.Clean(wd)
	}
	return filepath.Join(agentCwd, wd)
}

// bashHookInput is the tool input hooks see for a bash call. It mirrors
// Claude Code's Bash input, so existing hook scripts read the fields they
// expect.
func bashHookInput(a tools.Args) map[string]any {
	input := map[string]any{"command": a.Str("command")}
	if a.Has("description") {
		input["description"] = a.Str("description")
	}
	if a.Has("timeout") {
		input["timeout"] = a.Int("timeout")
	}
	if a.Has("run_in_background") {
		input["run_in_background"] = a.Bool("run_in_background")
	}
	if a.Has("workdir") {
		input["workdir"] = a.Str("workdir")
	}
	for _, k := range []string{"cols", "rows", "yield_time_ms"} {
		if a.Has(k) {
			input[k] = a.Int(k)
		}
	}
	if a.Has("tty") {
		input["tty"] = a.Bool("tty")
	}
	return input
}

// bashResult is the result of a started bash job and the tool response
// PostToolUse hooks see: at once for a background job, after waiting for a
// foreground one (started, when set, is told before the wait) until it
// ends or, with yield > 0, until yield has passed: the result then shows
// the output so far and "[still running: job <id>]", and write_stdin
// carries on from there. A ctx that ends stops the wait early, with the
// output so far, like a yield.
func (s *Service) bashResult(ctx context.Context, job *exec.Job, started func(*exec.Job), yield time.Duration) (CallResult, map[string]any) {
	res := CallResult{JobID: job.ID()}
	if job.Background() {
		res.Text = tools.StartedText(job.ID())
		return res, map[string]any{"stdout": "", "stderr": "", "exitCode": nil, "interrupted": false, "backgroundTaskId": job.ID()}
	}
	if started != nil {
		started(job)
	}
	wctx := ctx
	if yield > 0 {
		var cancel context.CancelFunc
		wctx, cancel = context.WithTimeout(ctx, yield)
		defer cancel()
	}
	snap, _ := job.Wait(wctx) // the snapshot is current either way
	if snap.State == exec.StateRunning {
		s.cursors.set(job.ID(), [2]int64{snap.Stdout.TotalBytes, snap.Stderr.TotalBytes}, s.jobExists)
		res.Text = tools.RenderResult(snap)
		return res, map[string]any{"stdout": snap.Stdout.Text, "stderr": snap.Stderr.Text, "exitCode": nil, "interrupted": false, "running": true}
	}
	interrupted := snap.State == exec.StateTimedOut || snap.State == exec.StateCancelled
	res.Text = tools.RenderResult(snap)
	res.ExitCode = snap.ExitCode
	res.IsError = interrupted
	return res, map[string]any{"stdout": snap.Stdout.Text, "stderr": snap.Stderr.Text, "exitCode": snap.ExitCode, "interrupted": interrupted}
}

// addHookOutput carries what the hooks of one event said into res: in its
// fields, and in its text, one marker line per hook, each preceded by a
// newline. The additional context reaches the model as Claude Code and Codex
// pass hookSpecificOutput.additionalContext on ("[hook context: …]"). A
// systemMessage reaches it too ("[hook message: …]"), because dshd has no
// one else to show it to; a message that already is the reason of a block
// is not repeated.
func addHookOutput(res *CallResult, out hooks.Outcome) {
	for _, r := range out.Results {
		if m := strings.TrimSpace(r.SystemMessage); m != "" {
			res.SystemMessages = append(res.SystemMessages, m)
			if !(out.Blocked && strings.Contains(out.Reason, m)) {
				res.Text += "\n[hook message: " + m + "]"
			}
		}
		addContext(res, []string{r.AdditionalContext})
	}
}

// addContext carries additional context into res: in its field, and in its
// text as one "[hook context: …]" line each.
func addContext(res *CallResult, ctx []string) {
	for _, c := range ctx {
		if c = strings.TrimSpace(c); c != "" {
			res.AdditionalContext = append(res.AdditionalContext, c)
			res.Text += "\n[hook context: " + c + "]"
		}
	}
}

func blockedText(event, reason string) string {
	if reason == "" {
		return "[blocked by " + event + " hook]"
	}
	return "[blocked by " + event + " hook: " + reason + "]"
}

// runHooks runs the hooks for one event and records a hook/invoked and a
// hook/result event for each one that ran, also when running them failed
// part way (the caller went away). Without a hook runner it does nothing.
func (s *Service) runHooks(ctx context.Context, callID, agentID string, in hooks.Input) (hooks.Outcome, error) {
	if s.hooks == nil {
		return hooks.Outcome{}, nil
	}
	if in.View == nil {
		// Hooks see the agent's view, as its commands do; never the
		// shared directory in its place.
		lease, err := s.ws.Acquire(agentID)
		if err != nil {
			return hooks.Outcome{}, fmt.Errorf("run %s hooks: %w", in.Event, err)
		}
		defer lease.Release()
		if lease != nil && lease.FD >= 0 {
			in.View = &sandbox.View{Target: lease.Target, FD: lease.FD}
		}
	}
	out, runErr := s.hooks.Run(ctx, in)
	rctx := context.WithoutCancel(ctx)
	for _, r := range out.Results {
		ev := string(in.Event)
		if err := s.record(rctx, agentID, agents.EventHookInvoked, hookInvokedEvent{
			CallID: callID, Event: ev, Handler: r.Handler, Dialect: string(r.Dialect),
		}); err != nil {
			return out, err
		}
		if err := s.record(rctx, agentID, agents.EventHookResult, hookResultEvent{
			CallID: callID, Event: ev, Handler: r.Handler, Dialect: string(r.Dialect),
			Decision: string(r.Decision), Reason: r.Reason, ExitCode: r.ExitCode, Signal: r.Signal,
			TimedOut: r.TimedOut, Stderr: r.Stderr, Error: r.Error, DurationMs: r.Duration.Milliseconds(),
			SystemMessage: r.SystemMessage, AdditionalContext: r.AdditionalContext,
		}); err != nil {
			return out, err
		}
	}
	if runErr != nil {
		return out, fmt.Errorf("run %s hooks: %w", in.Event, runErr)
	}
	if out.Blocked {
		s.log.Info("tool call blocked by hook", "agent_id", agentID, "call_id", callID, "event", in.Event, "reason", out.Reason)
	}
	return out, nil
}

// ownJob returns the job id if it belongs to agentID. A job of another agent
// is reported exactly like a job that does not exist.
func (s *Service) ownJob(id, agentID string) (*exec.Job, bool, error) {
	job, err := s.jobs.Job(id)
	if errors.Is(err, exec.ErrJobNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("look up job %s: %w", id, err)
	}
	if job.Snapshot().AgentID != agentID {
		return nil, false, nil
	}
	return job, true, nil
}

func notFound(id string) CallResult {
	return CallResult{IsError: true, Text: fmt.Sprintf("job %s not found (job_list lists your jobs)", id)}
}

// jobOutput runs job_output: the job's output so far, after waiting up to
// waitMs for it to finish.
func (s *Service) jobOutput(ctx context.Context, agentID string, a tools.Args) (CallResult, error) {
	id := a.Str("jobId")
	job, ok, err := s.ownJob(id, agentID)
	if err != nil || !ok {
		return notFound(id), err
	}
	if wait := min(time.Duration(a.Int("waitMs"))*time.Millisecond, maxWait); wait > 0 {
		t := time.NewTimer(wait)
		select {
		case <-job.Done():
		case <-t.C:
		case <-ctx.Done(): // the caller left: the output as it is now
		}
		t.Stop()
	}
	snap := job.Snapshot()
	res := CallResult{JobID: id, ExitCode: snap.ExitCode}
	if !ranged(a) {
		res.Text = tools.RenderResult(snap)
		return res, nil
	}
	if problem := rangeProblem(a); problem != "" {
		return CallResult{JobID: id, IsError: true, Text: problem}, nil
	}
	name, out := "stdout", snap.Stdout
	if a.Str("stream") == "stderr" {
		name, out = "stderr", snap.Stderr
	}
	st := newStream(job, id, name, out, snap.State == exec.StateRunning)
	switch {
	case a.Has("offset"):
		length := int64(tools.MaxReadBytes)
		if a.Has("length") {
			length = a.Int("length")
		}
		res.Text = st.readBytes(a.Int("offset"), length)
	case a.Has("pattern"):
		re, err := regexp.Compile(a.Str("pattern"))
		if err != nil {
			return CallResult{JobID: id, IsError: true, Text: "pattern is not a regular expression (RE2 syntax): " + err.Error()}, nil
		}
		most := int64(tools.DefaultMatches)
		if a.Has("line_count") {
			most = a.Int("line_count")
		}
		res.Text = st.grep(re, max(a.Int("start_line"), 1), most)
	case a.Has("tail_lines"):
		res.Text = st.readTail(a.Int("tail_lines"))
	default:
		res.Text = st.readLines(max(a.Int("start_line"), 1), a.Int("line_count"))
	}
	res.Text = strings.ToValidUTF8(res.Text, "\uFFFD") + endMarkers(snap)
	return res, nil
}

// ranged reports whether a job_output call reads a part of a stream
// rather than the job's whole rendered result.
func ranged(a tools.Args) bool {
	for _, k := range []string{"stream", "offset", "length", "start_line", "line_count", "tail_lines", "pattern"} {
		if a.Has(k) {
			return true
		}
	}
	return false
}

// rangeProblem says what is wrong with the range arguments of a job_output
// call that combines them in a way that means nothing; "" when nothing is.
func rangeProblem(a tools.Args) string {
	var modes []string
	for _, k := range []string{"offset", "start_line", "tail_lines"} {
		if a.Has(k) {
			modes = append(modes, k)
		}
	}
	switch {
	case a.Has("pattern") && (a.Has("offset") || a.Has("tail_lines")):
		return "pattern searches lines: combine it with start_line and line_count only, not with offset or tail_lines"
	case !a.Has("pattern") && len(modes) > 1:
		return "give one of offset, start_line and tail_lines, not " + strings.Join(modes, " and ")
	case a.Has("length") && !a.Has("offset"):
		return "length counts bytes from offset: give offset too (start_line and line_count read lines)"
	case a.Has("line_count") && !a.Has("start_line") && !a.Has("pattern"):
		return "line_count counts lines from start_line: give start_line too (or tail_lines for the last lines)"
	}
	return ""
}

// endMarkers are the lines that end a job_output range read: how the job
// ended, or that it still runs, as in a whole result.
func endMarkers(snap exec.Snapshot) string {
	snap.Stdout, snap.Stderr = exec.Output{}, exec.Output{}
	if m := tools.RenderResult(snap); m != "(no output)" {
		return "\n" + m
	}
	return ""
}

// jobList runs job_list: one line per job of the agent, oldest first.
func (s *Service) jobList(agentID string, a tools.Args) CallResult {
	snaps := s.jobs.Jobs(agentID, exec.State(a.Str("state")))
	if len(snaps) == 0 {
		return CallResult{Text: "(no jobs)"}
	}
	var b strings.Builder
	for i, sn := range snaps {
		if i > 0 {
			b.WriteByte('\n')
		}
		mode := "foreground"
		if sn.Background {
			mode = "background"
		}
		fmt.Fprintf(&b, "%s  %s  %s  %s", sn.ID, status(sn), mode, oneLine(sn.Command, 100))
	}
	return CallResult{Text: b.String()}
}

// status is a job's state with how it ended: "running", "exited 0",
// "cancelled SIGTERM", and what it left running: "exited 0, 1 process
// left running".
func status(sn exec.Snapshot) string {
	st := string(sn.State)
	switch {
	case sn.Signal != "":
		st += " " + sn.Signal
	case sn.ExitCode != nil:
		st += fmt.Sprintf(" %d", *sn.ExitCode)
	}
	if r := sn.Remaining; r != nil {
		st += fmt.Sprintf(", %d process(es) left running", r.Processes)
	}
	return st
}

// oneLine shortens a command for a listing: first line, at most n runes.
func oneLine(s string, n int) string {
	cut := false
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s, cut = s[:i], true
	}
	if r := []rune(s); len(r) > n {
		s, cut = string(r[:n]), true
	}
	if cut {
		s += " …"
	}
	return s
}

// jobKill runs job_kill: cancel one of the agent's running jobs.
func (s *Service) jobKill(ctx context.Context, agentID string, a tools.Args) (CallResult, error) {
	id := a.Str("jobId")
	job, ok, err := s.ownJob(id, agentID)
	if err != nil || !ok {
		return notFound(id), err
	}
	before := job.Snapshot()
	if before.State != exec.StateRunning && before.Remaining == nil {
		return CallResult{JobID: id, Text: fmt.Sprintf("job %s already finished: %s", id, status(before)), ExitCode: before.ExitCode}, nil
	}
	sn, err := s.jobs.Cancel(ctx, id)
	if errors.Is(err, exec.ErrJobNotFound) {
		return notFound(id), nil
	}
	if err != nil {
		return CallResult{JobID: id}, fmt.Errorf("cancel job %s: %w", id, err)
	}
	if sn.State == exec.StateRunning {
		return CallResult{JobID: id, Text: fmt.Sprintf("stopping job %s: SIGTERM sent to its process group, SIGKILL follows after the grace period", id)}, nil
	}
	if before.State != exec.StateRunning {
		// The job had finished; what it left running was stopped.
		if sn.Remaining != nil {
			return CallResult{JobID: id, Text: fmt.Sprintf("stopping the %d process(es) job %s left running: SIGTERM sent, SIGKILL follows after the grace period", sn.Remaining.Processes, id), ExitCode: sn.ExitCode}, nil
		}
		return CallResult{JobID: id, Text: fmt.Sprintf("stopped the %d process(es) job %s left running; the job itself had finished: %s", before.Remaining.Processes, id, status(sn)), ExitCode: sn.ExitCode}, nil
	}
	return CallResult{JobID: id, Text: fmt.Sprintf("stopped job %s: %s", id, status(sn)), ExitCode: sn.ExitCode}, nil
}
