package hooks

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/dshd/dshd/internal/exec"
	"github.com/dshd/dshd/internal/ids"
	"github.com/dshd/dshd/internal/stages"
)

// maxStderr bounds Result.Stderr.
const maxStderr = 2048

// claudeProjectDirEnv is the variable Claude Code gives its hooks.
const claudeProjectDirEnv = "CLAUDE_PROJECT_DIR"

// Runner fires hook events. It is safe for concurrent use.
type Runner struct {
	handlers []handler
	pr       ProcessRunner
	log      *slog.Logger
	turnIDs  *ids.Source
}

// NewRunner returns a Runner over cfg's handlers (nil cfg: none) that runs
// processes with pr and logs to logger (nil: discard). With a nil pr every
// matching handler is recorded as not run (and does not block).
func NewRunner(cfg *Config, pr ProcessRunner, logger *slog.Logger) *Runner {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	r := &Runner{pr: pr, log: logger, turnIDs: ids.NewSource(nil)}
	if cfg != nil {
		r.handlers = cfg.handlers
	}
	return r
}

// subject is what an event's matchers are tested against.
func subject(in Input) string {
	if in.Event == SessionStart {
		if in.Source == "" {
			return "startup"
		}
		return in.Source
	}
	return in.ToolName
}

// Matching returns the handlers Run would run for in, in run order, without
// running anything. Callers use it to record hook/invoked events.
func (r *Runner) Matching(in Input) []Handler {
	var out []Handler
	for _, h := range r.match(in) {
		out = append(out, h.Handler)
	}
	return out
}

func (r *Runner) match(in Input) []handler {
	s := subject(in)
	var out []handler
	for _, h := range r.handlers {
		if h.Event != in.Event {
			continue
		}
		if h.match(s) || (h.Dialect == DialectCodex && in.Event != SessionStart && slices.ContainsFunc(in.MatcherAliases, h.match)) {
			out = append(out, h)
		}
	}
	return out
}

// Run fires in.Event: it runs every matching handler at once (see the
// package comment), waits for all of them and merges their decisions in
// configuration order. With no matching handler it
// returns the zero Outcome. A handler that fails to run, exits with a status
// other than 0 or 2, is killed or times out is recorded in its Result and
// does not block.
//
// It returns ErrUnknownEvent for an event dshd does not fire, and ctx's error
// (with every handler's result, those cut short included) when ctx ends; a
// caller must then treat the call as blocked.
func (r *Runner) Run(ctx context.Context, in Input) (Outcome, error) {
	defer stages.Done(stages.Hooks, stages.Start())
	if !in.Event.supported() {
		return Outcome{}, fmt.Errorf("run hooks: %w: %q", ErrUnknownEvent, in.Event)
	}
	matched := r.match(in)
	var out Outcome
	payloads := map[Dialect][]byte{}
	for _, h := range matched {
		if _, ok := payloads[h.Dialect]; ok {
			continue
		}
		stdin, err := payload(h.Dialect, in, func() string { return r.turnIDs.New("turn_") })
		if err != nil {
			// Only unencodable ToolInput/ToolResponse gets here: a
			// caller bug, not a hook's fault.
			return out, fmt.Errorf("run hooks: encode %s payload: %w", h.Dialect, err)
		}
		payloads[h.Dialect] = stdin
	}
	if err := ctx.Err(); err != nil {
		return out, fmt.Errorf("run hooks: %w", err)
	}
	// Every matching handler starts at once, as in Claude Code and Codex;
	// results are kept in configuration order whatever order they end in.
	results := make([]Result, len(matched))
	var wg sync.WaitGroup
	for i, h := range matched {
		wg.Add(1)
		go func() {
			defer wg.Done()
			spec := exec.ProcessSpec{Command: h.Command, Cwd: in.Cwd, Stdin: payloads[h.Dialect], Timeout: h.Timeout, View: in.View}
			if h.Dialect == DialectClaudeCode && in.Cwd != "" {
				spec.ExtraEnv = map[string]string{claudeProjectDirEnv: in.Cwd}
			}
			var (
				pres exec.ProcessResult
				err  error
			)
			if r.pr == nil {
				err = errors.New("no process runner configured")
			} else {
				pres, err = r.pr.RunProcess(ctx, spec)
			}
			res := interpret(h.Handler, pres, err)
			if err != nil && ctx.Err() != nil {
				res.Error = "cut short: " + ctx.Err().Error()
			}
			results[i] = res
		}()
	}
	wg.Wait()
	out.Results = results
	for _, res := range out.Results {
		r.logResult(in, res)
	}
	if err := ctx.Err(); err != nil {
		return out, fmt.Errorf("run hooks: %w", err)
	}
	merge(&out, in.Event)
	return out, nil
}

func (r *Runner) logResult(in Input, res Result) {
	attrs := []any{"hook", res.Handler, "event", in.Event, "session_id", in.SessionID,
		"decision", res.Decision, "duration", res.Duration}
	if res.Error != "" {
		r.log.Warn("hook did not complete cleanly", append(attrs, "err", res.Error)...)
		return
	}
	r.log.Debug("hook ran", attrs...)
}

// interpret turns one process result into a Result.
func interpret(h Handler, p exec.ProcessResult, runErr error) Result {
	res := Result{Handler: h.Name, Dialect: h.Dialect, ExitCode: p.ExitCode, Signal: p.Signal,
		TimedOut: p.TimedOut, Stderr: short(p.Stderr), Duration: p.Duration}
	switch {
	case runErr != nil:
		res.Error = "hook did not run: " + runErr.Error()
	case p.TimedOut:
		res.Error = fmt.Sprintf("timed out after %s and was killed", h.Timeout)
	case p.Signal != "":
		res.Error = "killed by signal " + p.Signal
	case p.ExitCode == nil:
		res.Error = "exited without a status"
	case *p.ExitCode == 2:
		res.Decision = DecisionDeny
		res.Reason = strings.TrimSpace(string(p.Stderr))
		if res.Reason == "" {
			res.Reason = fmt.Sprintf("hook %s exited with status 2 without a reason on stderr", h.Name)
		}
	case *p.ExitCode == 0:
		parseStdout(h, p.Stdout, &res)
	default:
		res.Error = fmt.Sprintf("exited with status %d", *p.ExitCode)
	}
	return res
}

// hookOutput is the JSON a hook may print on stdout with exit 0.
type hookOutput struct {
	Continue           *bool  `json:"continue"`
	StopReason         string `json:"stopReason"`
	Decision           string `json:"decision"`
	Reason             string `json:"reason"`
	SystemMessage      string `json:"systemMessage"`
	HookSpecificOutput *struct {
		PermissionDecision       string `json:"permissionDecision"`
		PermissionDecisionReason string `json:"permissionDecisionReason"`
		AdditionalContext        string `json:"additionalContext"`
	} `json:"hookSpecificOutput"`
}

// parseStdout reads the decision from an exit-0 hook's stdout. Only stdout
// starting with '{' (after white space) is JSON; other text is ignored except
// as SessionStart context, which is what both dialects do with it.
func parseStdout(h Handler, stdout []byte, res *Result) {
	trimmed := bytes.TrimSpace(stdout)
	if len(trimmed) == 0 {
		return
	}
	if trimmed[0] != '{' {
		if h.Event == SessionStart {
			res.AdditionalContext = string(trimmed)
		}
		return
	}
	var o hookOutput
	if err := json.Unmarshal(trimmed, &o); err != nil {
		res.Error = "stdout looks like JSON but is not valid hook output: " + err.Error()
		return
	}
	var problems []string
	consider := func(d Decision, reason string) {
		if d.rank() > res.Decision.rank() {
			res.Decision, res.Reason = d, reason
		}
	}
	if hso := o.HookSpecificOutput; hso != nil {
		res.AdditionalContext = hso.AdditionalContext
		reason := hso.PermissionDecisionReason
		if reason == "" {
			reason = o.Reason
		}
		switch pd := Decision(hso.PermissionDecision); pd {
		case DecisionAllow, DecisionAsk, DecisionDeny:
			consider(pd, reason)
		case DecisionNone:
		default:
			problems = append(problems, fmt.Sprintf("unknown permissionDecision %q", hso.PermissionDecision))
		}
	}
	switch o.Decision {
	case "block":
		consider(DecisionDeny, o.Reason)
	case "approve":
		consider(DecisionAllow, o.Reason)
	case "":
	default:
		problems = append(problems, fmt.Sprintf("unknown decision %q", o.Decision))
	}
	if o.Continue != nil && !*o.Continue {
		reason := o.StopReason
		if reason == "" {
			reason = fmt.Sprintf("hook %s asked to stop (continue: false)", h.Name)
		}
		consider(DecisionDeny, reason)
	}
	res.SystemMessage = o.SystemMessage
	if res.Reason == "" && (res.Decision == DecisionDeny || res.Decision == DecisionAsk) {
		// A hook that blocks with only a systemMessage (hookify does)
		// still explains itself: the message is the reason.
		res.Reason = o.SystemMessage
	}
	if len(problems) > 0 {
		res.Error = strings.Join(problems, "; ")
	}
}

// merge sets out's decision, reason and Blocked from its results: deny over
// ask over allow; "ask" blocks because nobody can answer; SessionStart never
// blocks.
func merge(out *Outcome, ev EventName) {
	var reasons []string
	for _, r := range out.Results {
		if r.Decision.rank() > out.Decision.rank() {
			out.Decision, reasons = r.Decision, nil
		}
		if r.Decision == out.Decision && r.Decision != DecisionNone {
			reason := r.Reason
			if reason == "" {
				reason = fmt.Sprintf("hook %s decided %s without a reason", r.Handler, r.Decision)
			}
			reasons = append(reasons, reason)
		}
	}
	out.Reason = strings.Join(reasons, "\n")
	if out.Decision == DecisionAsk {
		out.Reason = "a hook asked for confirmation, but dshd has no one to ask, so the call is blocked: " + out.Reason
	}
	out.Blocked = ev != SessionStart && (out.Decision == DecisionDeny || out.Decision == DecisionAsk)
}

// short returns the start of b as valid UTF-8, at most maxStderr bytes.
func short(b []byte) string {
	if len(b) > maxStderr {
		cut := maxStderr
		for cut > 0 && !utf8.RuneStart(b[cut]) {
			cut-- // do not split a multi-byte rune
		}
		b = b[:cut]
	}
	return strings.ToValidUTF8(string(b), "\uFFFD")
}
