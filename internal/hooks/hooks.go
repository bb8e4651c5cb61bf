// Package hooks runs hook scripts written for Claude Code or Codex around the
// tool calls dshd executes, so users can reuse the validators and loggers
// they already have.
//
// # Configuration
//
// Load reads two files under the dshd home, in this order:
//
//   - <home>/hooks/claude-code.json — Claude Code's settings format,
//     {"hooks":{"PreToolUse":[{"matcher":"Bash","hooks":[{"type":"command","command":"…","timeout":60}]}]}},
//     or the bare event map without the "hooks" key. Other settings keys
//     beside "hooks" (permissions, env, …) are ignored, so a copied
//     settings.json works as is.
//   - <home>/hooks/codex.json — Codex's hooks.json format, the same shape;
//     a handler's timeout is "timeout" or "timeoutSec".
//
// Timeouts are in seconds and default to 60. A missing file means no hooks
// of that dialect. Everything is validated at load and every problem is
// reported at once (ErrInvalidConfig). Events dshd never fires but the
// dialect knows (Stop, UserPromptSubmit, …) are ignored and listed by
// Describe; names neither dialect knows are errors, so typos are loud.
//
// # Running
//
// dshd fires SessionStart (source "startup" or "resume"), PreToolUse and
// PostToolUse. The matching handlers all start at once, as in Claude Code and
// Codex, each in the agent's cwd through a ProcessRunner, which gives them the
// ordinary environment without managed DSH_* values. Claude Code handlers
// also get CLAUDE_PROJECT_DIR=<cwd>. Run waits for every one of them, so
// logging hooks see every call, and then applies their results in
// configuration order — every Claude Code handler before every Codex handler,
// and within a file in the order written — so merged reasons, context and
// messages read the same on every run.
//
// # Decisions
//
// Exit 2 blocks, with stderr as the reason. Exit 0 with stdout starting with
// '{' is parsed as JSON: hookSpecificOutput.permissionDecision
// "deny"/"ask"/"allow" with permissionDecisionReason, top-level
// decision "block" (or the legacy "approve") with reason, and continue:false
// with stopReason (treated as a block). A block without any reason takes the
// hook's systemMessage as its reason (hookify denies that way). systemMessage
// and hookSpecificOutput.additionalContext are kept in each Result. Output that looks like JSON but is not
// is tolerated and recorded in Result.Error. Any other exit, a signal death or
// a timeout does not block; it is recorded. Several decisions merge as
// deny over ask over allow. There is no person to ask, so "ask" fails closed:
// it blocks with a reason saying so. For PostToolUse a block means the caller
// marks the tool result an error (the command has already run). SessionStart
// never blocks: its decisions are recorded only.
//
// Floor 4 of the layout (docs/design.md#floors): it imports only packages on the floors below.
package hooks

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/dshd/dshd/internal/exec"
	"github.com/dshd/dshd/internal/sandbox"
)

// Dialect is the hook system a handler was written for.
type Dialect string

// The dialects dshd bridges.
const (
	// DialectClaudeCode is Claude Code's hooks, from <home>/hooks/claude-code.json.
	DialectClaudeCode Dialect = "claude-code"
	// DialectCodex is Codex's hooks, from <home>/hooks/codex.json.
	DialectCodex Dialect = "codex"
)

// EventName is a hook event.
type EventName string

// The events dshd fires.
const (
	// SessionStart fires when an agent starts (source "startup") or is
	// resumed (source "resume"). Its matchers match the source.
	SessionStart EventName = "SessionStart"
	// PreToolUse fires before a tool call starts a process; it can block it.
	PreToolUse EventName = "PreToolUse"
	// PostToolUse fires after a tool call; a block marks the result an error.
	PostToolUse EventName = "PostToolUse"
)

// Events lists the events dshd fires, in the order they happen.
func Events() []EventName { return []EventName{SessionStart, PreToolUse, PostToolUse} }

func (e EventName) supported() bool {
	return e == SessionStart || e == PreToolUse || e == PostToolUse
}

// DefaultTimeout is a handler's timeout when its configuration gives none.
const DefaultTimeout = 60 * time.Second

// Handler is one configured hook command.
type Handler struct {
	// Dialect is the file the handler came from.
	Dialect Dialect
	// Event is the event it handles.
	Event EventName
	// Matcher is the matcher as written ("" when absent).
	Matcher string
	// Command is run with bash -c.
	Command string
	// Timeout bounds one run; the process group is killed when it passes.
	Timeout time.Duration
	// Name locates the handler in its file, e.g. "claude-code:PreToolUse[0].hooks[1]".
	Name string
}

// ProcessRunner runs one hook process. *exec.Executor implements it: the
// process gets the ordinary environment (no DSH_* values) plus ExtraEnv, its
// own process group, and is killed when Timeout passes.
type ProcessRunner interface {
	RunProcess(ctx context.Context, p exec.ProcessSpec) (exec.ProcessResult, error)
}

var _ ProcessRunner = (*exec.Executor)(nil)

// Input describes the event being fired.
type Input struct {
	// Event is the event to fire. Required.
	Event EventName
	// SessionID is the agent's id.
	SessionID string
	// Cwd is the agent's working directory; hooks run there. It is also
	// CLAUDE_PROJECT_DIR for Claude Code hooks (unset when Cwd is empty).
	Cwd string
	// View, if set, is the agent's snapshot workspace: hooks see it at its
	// target, as the agent's commands do.
	View *sandbox.View
	// ToolName is the tool being called ("Bash"); tool events only.
	ToolName string
	// MatcherAliases are more names Codex handlers' matchers are tested
	// against, never sent to a hook: Codex lets a matcher for Write or
	// Edit select apply_patch this way. Claude Code has no such aliases
	// (its Edit and Write handlers read fields a patch has not). Tool
	// events only.
	MatcherAliases []string
	// ToolUseID is the tool call's id; tool events only.
	ToolUseID string
	// TurnID is Codex's turn_id; when empty, ToolUseID is used, and when
	// that is empty too a fresh id. Tool events only.
	TurnID string
	// Source is "startup" or "resume"; SessionStart only ("" = "startup").
	Source string
	// ToolInput is the tool's input as the hook sees it, e.g.
	// {"command":"ls"}; tool events only (nil = {}).
	ToolInput any
	// ToolResponse is the tool's result; PostToolUse only (nil = {}).
	ToolResponse any
}

// Decision is a hook's verdict on a call.
type Decision string

// The decisions, weakest first. Merging keeps the strongest.
const (
	// DecisionNone: the hook said nothing about the call.
	DecisionNone Decision = ""
	// DecisionAllow: the hook approves the call.
	DecisionAllow Decision = "allow"
	// DecisionAsk: the hook wants a person to confirm; dshd has none, so
	// this blocks.
	DecisionAsk Decision = "ask"
	// DecisionDeny: the hook blocks the call.
	DecisionDeny Decision = "deny"
)

func (d Decision) rank() int {
	switch d {
	case DecisionAllow:
		return 1
	case DecisionAsk:
		return 2
	case DecisionDeny:
		return 3
	}
	return 0
}

// Result is what one handler run produced.
type Result struct {
	// Handler is the handler's Name.
	Handler string
	// Dialect is the handler's dialect.
	Dialect Dialect
	// Decision is the handler's verdict ("" for none).
	Decision Decision
	// Reason explains Decision (stderr on exit 2, the JSON reason otherwise).
	Reason string
	// ExitCode is the exit status; nil after a signal death, a timeout or a
	// failure to start.
	ExitCode *int
	// Signal names the signal that killed the hook ("SIGKILL"), if any.
	Signal string
	// TimedOut reports that the hook ran past its timeout and was killed.
	TimedOut bool
	// Stderr is the start of the hook's stderr (at most 2 KiB).
	Stderr string
	// Duration is how long the hook ran.
	Duration time.Duration
	// Error describes a non-blocking failure: the process could not run,
	// exited with a status other than 0 or 2, was killed, timed out, or
	// printed malformed JSON. "" when the hook behaved.
	Error string
	// AdditionalContext is hookSpecificOutput.additionalContext, or for
	// SessionStart plain (non-JSON) stdout: text the hook offers the model.
	AdditionalContext string
	// SystemMessage is the hook's top-level systemMessage: a message meant
	// for whoever watches the session. When the hook blocks without any
	// other reason, it is also the Reason.
	SystemMessage string
}

// AdditionalContext returns the non-blank additionalContext of every result,
// in configuration order.
func (o Outcome) AdditionalContext() []string {
	var out []string
	for _, r := range o.Results {
		if c := strings.TrimSpace(r.AdditionalContext); c != "" {
			out = append(out, c)
		}
	}
	return out
}

// SystemMessages returns the non-blank systemMessage of every result, in
// configuration order.
func (o Outcome) SystemMessages() []string {
	var out []string
	for _, r := range o.Results {
		if m := strings.TrimSpace(r.SystemMessage); m != "" {
			out = append(out, m)
		}
	}
	return out
}

// Outcome is the merged result of every handler that matched.
type Outcome struct {
	// Blocked reports that the call must not proceed (PreToolUse) or that its
	// result must be marked an error (PostToolUse). Always false for
	// SessionStart.
	Blocked bool
	// Decision is the strongest decision of all results.
	Decision Decision
	// Reason explains a block: the reasons of the results with the winning
	// decision, joined by newlines.
	Reason string
	// Results holds one entry per handler run, in run order.
	Results []Result
}

// Errors returned by this package; test them with errors.Is.
var (
	// ErrInvalidConfig: Load found a problem in a hook file; the error is a
	// *ConfigError listing every problem.
	ErrInvalidConfig = errors.New("invalid hook configuration")
	// ErrUnknownEvent: Run was given an event other than SessionStart,
	// PreToolUse or PostToolUse.
	ErrUnknownEvent = errors.New("unknown hook event")
)
