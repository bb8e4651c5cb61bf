package hooks

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"
)

// Config is a loaded, validated hook configuration. The zero value and a nil
// *Config have no hooks. A Config is immutable and safe for concurrent use.
type Config struct {
	handlers []handler
	files    []fileInfo
}

// handler is a Handler with its compiled matcher.
type handler struct {
	Handler
	match func(subject string) bool
}

type fileInfo struct {
	dialect Dialect
	path    string
	present bool
	ignored []string // events the dialect knows but dshd does not fire
}

// ConfigError lists every problem Load found. It wraps ErrInvalidConfig.
type ConfigError struct {
	// Problems are complete sentences naming the file and the handler.
	Problems []string
}

// Error joins the problems.
func (e *ConfigError) Error() string {
	return ErrInvalidConfig.Error() + ": " + strings.Join(e.Problems, "; ")
}

// Unwrap returns ErrInvalidConfig.
func (e *ConfigError) Unwrap() error { return ErrInvalidConfig }

// File returns the path of a dialect's configuration file under home.
func File(home string, d Dialect) string {
	return filepath.Join(home, "hooks", string(d)+".json")
}

// Dialects lists the dialects in the order their hooks run.
func Dialects() []Dialect { return []Dialect{DialectClaudeCode, DialectCodex} }

// knownEvents are the events each dialect defines. dshd fires only
// SessionStart, PreToolUse and PostToolUse; the others load (so a copied
// settings file works) but never run.
var knownEvents = map[Dialect][]string{
	DialectClaudeCode: {"PreToolUse", "PostToolUse", "PostToolUseFailure", "PermissionRequest",
		"Notification", "UserPromptSubmit", "Stop", "SubagentStart", "SubagentStop",
		"PreCompact", "PostCompact", "SessionStart", "SessionEnd"},
	DialectCodex: {"PreToolUse", "PostToolUse", "PermissionRequest", "SessionStart",
		"UserPromptSubmit", "Stop", "StopFailure", "PreCompact", "PostCompact",
		"SubagentStart", "SubagentStop"},
}

// Load reads <home>/hooks/claude-code.json and <home>/hooks/codex.json. A
// missing file contributes no hooks. It returns a *ConfigError (wrapping
// ErrInvalidConfig) listing every problem: JSON that does not parse (naming
// the file), an unknown event name, a handler whose type is not "command",
// a blank command, a bad timeout, or a matcher that is not a valid regular
// expression (naming the handler). Other read failures are returned wrapped.
func Load(home string) (*Config, error) {
	c := &Config{}
	var problems []string
	for _, d := range Dialects() {
		path := File(home, d)
		fi := fileInfo{dialect: d, path: path}
		data, err := os.ReadFile(path)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			c.files = append(c.files, fi)
			continue
		case err != nil:
			return nil, fmt.Errorf("load hooks: %w", err)
		}
		fi.present = true
		hs, ignored, probs := parseFile(d, path, data)
		fi.ignored = ignored
		c.files = append(c.files, fi)
		c.handlers = append(c.handlers, hs...)
		problems = append(problems, probs...)
	}
	if len(problems) > 0 {
		return nil, &ConfigError{Problems: problems}
	}
	return c, nil
}

// groupJSON is one matcher group: {"matcher": "...", "hooks": [...]}.
type groupJSON struct {
	Matcher *string           `json:"matcher"`
	Hooks   []json.RawMessage `json:"hooks"`
}

// handlerJSON is one handler entry. Unknown fields (async, statusMessage, …)
// are ignored so files written for the real tools load unchanged.
type handlerJSON struct {
	Type       *string  `json:"type"`
	Command    *string  `json:"command"`
	Timeout    *float64 `json:"timeout"`
	TimeoutSec *float64 `json:"timeoutSec"`
}

// parseFile parses one dialect's file. It returns handlers in file order,
// grouped by event in the order of Events(), the ignored event names, and
// problems.
func parseFile(d Dialect, path string, data []byte) ([]handler, []string, []string) {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, nil, nil
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(data, &top); err != nil {
		return nil, nil, []string{fmt.Sprintf("%s: invalid JSON: %v", path, err)}
	}
	events := top
	if raw, ok := top["hooks"]; ok {
		events = nil
		if err := json.Unmarshal(raw, &events); err != nil {
			return nil, nil, []string{fmt.Sprintf("%s: \"hooks\" must be an object of events: %v", path, err)}
		}
	}
	var (
		byEvent  = map[EventName][]handler{}
		ignored  []string
		problems []string
	)
	for _, name := range slices.Sorted(maps.Keys(events)) {
		ev := EventName(name)
		if !ev.supported() {
			if slices.Contains(knownEvents[d], name) {
				ignored = append(ignored, name)
				continue
			}
			problems = append(problems, fmt.Sprintf("%s: unknown event %q (dshd runs SessionStart, PreToolUse and PostToolUse)", path, name))
			continue
		}
		var groups []groupJSON
		if err := json.Unmarshal(events[name], &groups); err != nil {
			problems = append(problems, fmt.Sprintf("%s: %s:%s must be a list of matcher groups: %v", path, d, name, err))
			continue
		}
		for gi, g := range groups {
			gname := fmt.Sprintf("%s:%s[%d]", d, name, gi)
			matcher := ""
			if g.Matcher != nil {
				matcher = *g.Matcher
			}
			match, err := compileMatcher(d, matcher)
			if err != nil {
				problems = append(problems, fmt.Sprintf("%s: %s: invalid matcher %q: %v", path, gname, matcher, err))
				continue
			}
			if len(g.Hooks) == 0 {
				problems = append(problems, fmt.Sprintf("%s: %s: \"hooks\" is missing or empty", path, gname))
			}
			for hi, raw := range g.Hooks {
				hname := fmt.Sprintf("%s.hooks[%d]", gname, hi)
				h, err := parseHandler(d, raw)
				if err != nil {
					problems = append(problems, fmt.Sprintf("%s: %s: %v", path, hname, err))
					continue
				}
				h.Dialect, h.Event, h.Matcher, h.Name = d, ev, matcher, hname
				byEvent[ev] = append(byEvent[ev], handler{Handler: h, match: match})
			}
		}
	}
	var out []handler
	for _, ev := range Events() {
		out = append(out, byEvent[ev]...)
	}
	return out, ignored, problems
}

// parseHandler checks one handler entry.
func parseHandler(d Dialect, raw json.RawMessage) (Handler, error) {
	var hj handlerJSON
	if err := json.Unmarshal(raw, &hj); err != nil {
		return Handler{}, fmt.Errorf("invalid handler: %v", err)
	}
	switch {
	case hj.Type == nil:
		return Handler{}, errors.New(`"type" is missing; only "command" is supported`)
	case *hj.Type != "command":
		return Handler{}, fmt.Errorf(`type %q is not supported; only "command" is`, *hj.Type)
	case hj.Command == nil || strings.TrimSpace(*hj.Command) == "":
		return Handler{}, errors.New(`"command" is blank`)
	}
	timeout := hj.Timeout
	if d == DialectCodex && hj.TimeoutSec != nil {
		if timeout != nil {
			return Handler{}, errors.New(`give "timeout" or "timeoutSec", not both`)
		}
		timeout = hj.TimeoutSec
	}
	h := Handler{Command: *hj.Command, Timeout: DefaultTimeout}
	if timeout != nil {
		secs := *timeout
		if secs <= 0 || math.IsInf(secs, 0) || secs > float64(math.MaxInt64/int64(time.Second)) {
			return Handler{}, fmt.Errorf("timeout %v must be a positive number of seconds", secs)
		}
		h.Timeout = time.Duration(secs * float64(time.Second))
	}
	return h, nil
}

// exactMatcher matches Claude Code's rule for plain tool names: only
// letters, digits, '_' and '|' (alternatives).
var exactMatcher = regexp.MustCompile(`^[A-Za-z0-9_|]+$`)

// compileMatcher turns a matcher into a predicate on the event's subject (the
// tool name, or the source for SessionStart).
//
// Both dialects: absent, "" and "*" match everything.
//
// Claude Code: a matcher made only of letters, digits, '_' and '|' matches
// names exactly, '|' separating alternatives ("Bash" does not match
// "BashOutput"). Anything else is a regular expression tested unanchored
// against the subject, as Claude Code does with RegExp.test: "^Bash$" is
// exact, "Ba" matches "Bash".
//
// Codex: every other matcher is a regular expression, tested unanchored, as
// Codex documents its matchers. (Codex's own code also short-cuts plain
// names to exact matches; with dshd's single tool name "Bash" the two agree.)
func compileMatcher(d Dialect, m string) (func(string) bool, error) {
	if m == "" || m == "*" {
		return func(string) bool { return true }, nil
	}
	if d == DialectClaudeCode && exactMatcher.MatchString(m) {
		alts := strings.Split(m, "|")
		return func(s string) bool { return slices.Contains(alts, s) }, nil
	}
	re, err := regexp.Compile(m)
	if err != nil {
		return nil, err
	}
	return re.MatchString, nil
}

// Handlers returns every runnable handler: Claude Code's before Codex's, and
// within a file grouped by event (SessionStart, PreToolUse, PostToolUse) in
// the order written.
func (c *Config) Handlers() []Handler {
	if c == nil {
		return nil
	}
	out := make([]Handler, len(c.handlers))
	for i, h := range c.handlers {
		out[i] = h.Handler
	}
	return out
}

// HandlerInfo describes one handler for listings such as GET /hooks.
type HandlerInfo struct {
	Name           string  `json:"name"`
	Matcher        string  `json:"matcher"`
	Command        string  `json:"command"`
	TimeoutSeconds float64 `json:"timeoutSeconds"`
}

// EventHooks lists a dialect's handlers for one event, in run order.
type EventHooks struct {
	Event    EventName     `json:"event"`
	Handlers []HandlerInfo `json:"handlers"`
}

// DialectHooks describes one dialect's configuration file.
type DialectHooks struct {
	// Dialect is "claude-code" or "codex".
	Dialect Dialect `json:"dialect"`
	// Path is the file read.
	Path string `json:"path"`
	// Present reports whether the file existed.
	Present bool `json:"present"`
	// Events lists every event dshd fires (SessionStart, PreToolUse,
	// PostToolUse), each with its handlers (possibly none).
	Events []EventHooks `json:"events"`
	// Ignored lists events in the file that dshd never fires, sorted.
	Ignored []string `json:"ignored"`
}

// Describe lists the configuration by dialect (in run order) and event, for
// GET /hooks. It never runs a hook. A nil *Config describes nothing.
func (c *Config) Describe() []DialectHooks {
	if c == nil {
		return nil
	}
	out := make([]DialectHooks, 0, len(c.files))
	for _, f := range c.files {
		dh := DialectHooks{Dialect: f.dialect, Path: f.path, Present: f.present, Ignored: slices.Clone(f.ignored)}
		if dh.Ignored == nil {
			dh.Ignored = []string{}
		}
		for _, ev := range Events() {
			eh := EventHooks{Event: ev, Handlers: []HandlerInfo{}}
			for _, h := range c.handlers {
				if h.Dialect == f.dialect && h.Event == ev {
					eh.Handlers = append(eh.Handlers, HandlerInfo{Name: h.Name, Matcher: h.Matcher,
						Command: h.Command, TimeoutSeconds: h.Timeout.Seconds()})
				}
			}
			dh.Events = append(dh.Events, eh)
		}
		out = append(out, dh)
	}
	return out
}
