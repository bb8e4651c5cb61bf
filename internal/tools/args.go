package tools

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
)

// kind is the JSON type a declared argument must have.
type kind int

const (
	kindString kind = iota
	kindInteger
	kindBool
)

// jsonType is the JSON schema type of k.
func (k kind) jsonType() string {
	switch k {
	case kindInteger:
		return "integer"
	case kindBool:
		return "boolean"
	}
	return "string"
}

func (k kind) String() string {
	switch k {
	case kindString:
		return "a string"
	case kindInteger:
		return "a non-negative integer"
	case kindBool:
		return "a boolean"
	}
	return "?"
}

// MaxReadBytes bounds what one job_output call returns of a stream (and
// is the default length of a byte read).
const MaxReadBytes = 64 << 10

// DefaultMatches is how many matching lines job_output returns with pattern
// unless line_count says otherwise.
const DefaultMatches = 200

// maxInteger bounds integer arguments (milliseconds) so that converting
// them to a time.Duration cannot overflow: about 31 years.
const maxInteger = 1e12

// param declares one tool argument: the rule ParseArgs applies and, from
// the same fields, the argument's JSON schema in Definitions.
type param struct {
	name        string
	kind        kind
	required    bool
	empty       bool     // a required string may be empty
	oneOf       []string // allowed values of a string, nil = any
	minimum     *int     // advertised minimum of an integer (ParseArgs takes any non-negative one)
	description string
}

func minimum(n int) *int { return &n }

// params lists the arguments each tool declares; anything else a model sends
// (env and stdin included) is ignored and recorded as ignored.
var params = map[string][]param{
	ToolBash: {
		{name: "command", kind: kindString, required: true, description: "The bash command to run."},
		{name: "description", kind: kindString, description: "A short description (5-10 words) of what the command does."},
		{name: "timeout", kind: kindInteger, minimum: minimum(1), description: "Foreground timeout in milliseconds. The command's process group is stopped when it expires."},
		{name: "workdir", kind: kindString, description: "Directory to run the command in; relative paths are resolved against your working directory. Defaults to your working directory."},
		{name: "run_in_background", kind: kindBool, description: "Start the command as a background job and return its job id at once. Use job_output to read its output."},
		{name: "tty", kind: kindBool, description: "Run the command in a terminal (for REPLs, prompts, full-screen programs): output is what the terminal shows, input comes from write_stdin. The call returns after yield_time_ms (default 10000) with the job id if the command still runs."},
		{name: "cols", kind: kindInteger, minimum: minimum(1), description: "Terminal width with tty (default 80)."},
		{name: "rows", kind: kindInteger, minimum: minimum(1), description: "Terminal height with tty (default 24)."},
		{name: "yield_time_ms", kind: kindInteger, minimum: minimum(0), description: "Return after this many milliseconds if the command still runs, with its job id and the output so far; it goes on running (until its timeout) and write_stdin continues it. Default: 10000 with tty, else wait for the end."},
	},
	ToolJobOutput: {
		{name: "jobId", kind: kindString, required: true, description: "The job id returned when the job was started."},
		{name: "waitMs", kind: kindInteger, minimum: minimum(0), description: "Wait up to this many milliseconds for the job to finish before reading its output. 0 or omitted: do not wait."},
		{name: "stream", kind: kindString, oneOf: []string{"stdout", "stderr"}, description: "The stream offset, start_line, tail_lines and pattern read: stdout (default) or stderr."},
		{name: "offset", kind: kindInteger, minimum: minimum(0), description: "Read the stream's bytes from this byte offset (0 = its first byte)."},
		{name: "length", kind: kindInteger, minimum: minimum(1), description: fmt.Sprintf("How many bytes to read from offset (default and most: %d).", MaxReadBytes)},
		{name: "start_line", kind: kindInteger, minimum: minimum(1), description: "Read whole lines from this line number (1 = the first line); with pattern, search from this line."},
		{name: "line_count", kind: kindInteger, minimum: minimum(1), description: fmt.Sprintf("How many lines to read from start_line (default: as many as fit in %d bytes); with pattern, the most matching lines to return (default %d).", MaxReadBytes, DefaultMatches)},
		{name: "tail_lines", kind: kindInteger, minimum: minimum(1), description: "Read the stream's last this many lines."},
		{name: "pattern", kind: kindString, description: "Return only the lines that match this regular expression (RE2 syntax, as Go's regexp), each as <line number>:<line>."},
	},
	ToolJobList: {
		{name: "state", kind: kindString, oneOf: []string{"running", "exited", "timed_out", "cancelled", "lost"}, description: "Only list jobs in this state."},
	},
	ToolJobKill: {
		{name: "jobId", kind: kindString, required: true, description: "The id of the job to stop."},
	},
	ToolWriteStdin: {
		{name: "session_id", kind: kindString, required: true, description: "The job id a bash call returned."},
		{name: "chars", kind: kindString, description: "Characters to write to the job's input; empty or omitted: only read new output."},
		{name: "yield_time_ms", kind: kindInteger, minimum: minimum(0), description: "How long to wait for output before returning (default 250 ms after a write, 5000 ms when only polling; at most 30000)."},
		{name: "max_output_tokens", kind: kindInteger, minimum: minimum(1), description: "Most output to return, in tokens of about 4 bytes (default 10000); longer output keeps its head and tail."},
	},
	ToolReadFile: {
		{name: "file_path", kind: kindString, required: true, description: "The file to read: absolute, or relative to your working directory."},
		{name: "offset", kind: kindInteger, minimum: minimum(1), description: "The line number to start reading from (1 = the first line). Give it for files too long to read at once."},
		{name: "limit", kind: kindInteger, minimum: minimum(1), description: fmt.Sprintf("How many lines to read (default %d).", DefaultReadLines)},
	},
	ToolWriteFile: {
		{name: "file_path", kind: kindString, required: true, description: "The file to write: absolute, or relative to your working directory."},
		{name: "content", kind: kindString, required: true, empty: true, description: "The whole content of the file."},
	},
	ToolEditFile: {
		{name: "file_path", kind: kindString, required: true, description: "The file to edit: absolute, or relative to your working directory."},
		{name: "old_string", kind: kindString, required: true, empty: true, description: "The text to replace, exactly as the file has it (empty: make a file that does not exist yet)."},
		{name: "new_string", kind: kindString, required: true, empty: true, description: "The text to replace it with (must differ from old_string)."},
		{name: "replace_all", kind: kindBool, description: "Replace every occurrence of old_string (default false: it must occur once)."},
	},
	ToolApplyPatch: {
		{name: "input", kind: kindString, required: true, description: "The entire patch, from *** Begin Patch to *** End Patch."},
	},
}

// schema is the JSON schema of p.
func (p param) schema() map[string]any {
	s := map[string]any{"type": p.kind.jsonType(), "description": p.description}
	if p.oneOf != nil {
		enum := make([]any, len(p.oneOf))
		for i, v := range p.oneOf {
			enum[i] = v
		}
		s["enum"] = enum
	}
	if p.minimum != nil {
		s["minimum"] = *p.minimum
	}
	return s
}

// argumentsSchema is the JSON schema of a tool's arguments object.
func argumentsSchema(tool string) map[string]any {
	props := map[string]any{}
	var required []any
	for _, p := range params[tool] {
		props[p.name] = p.schema()
		if p.required {
			required = append(required, p.name)
		}
	}
	s := map[string]any{
		"type":                 "object",
		"properties":           props,
		"additionalProperties": false,
	}
	if len(required) > 0 {
		s["required"] = required
	}
	return s
}

// Args holds the declared arguments of one call that were present (and not
// null), decoded, plus the sorted names of everything that was ignored.
type Args struct {
	strings map[string]string
	ints    map[string]int64
	bools   map[string]bool
	ignored []string
}

// Known reports whether name is one of the tools of Definitions.
func Known(name string) bool {
	_, ok := params[name]
	return ok
}

// Str returns the string argument name, "" when absent.
func (a Args) Str(name string) string { return a.strings[name] }

// Int returns the integer argument name, 0 when absent.
func (a Args) Int(name string) int64 { return a.ints[name] }

// Bool returns the boolean argument name, false when absent.
func (a Args) Bool(name string) bool { return a.bools[name] }

// Ignored returns the sorted names of the arguments that were sent but not
// declared; never nil.
func (a Args) Ignored() []string { return a.ignored }

// Has reports whether the declared argument name was present and not null.
func (a Args) Has(name string) bool {
	_, s := a.strings[name]
	_, i := a.ints[name]
	_, b := a.bools[name]
	return s || i || b
}

// Unwrap returns the arguments object a JSON string raw holds (OpenAI's
// APIs deliver a function call's arguments as a string of JSON), and raw
// itself when it is not a string or holds no JSON object.
func Unwrap(raw json.RawMessage) json.RawMessage {
	trimmed := bytes.TrimSpace(raw)
	if len(trimmed) == 0 || trimmed[0] != '"' {
		return raw
	}
	var s string
	if json.Unmarshal(trimmed, &s) != nil {
		return raw
	}
	inner := bytes.TrimSpace([]byte(s))
	if len(inner) == 0 || inner[0] != '{' || !json.Valid(inner) {
		return raw
	}
	return inner
}

// ParseArgs decodes raw (a JSON object, a JSON string holding one, or
// empty/null for no arguments) against the declared parameters of tool.
// Undeclared names are collected in ignored, sorted. A declared argument
// whose value is null counts as absent. Every problem is reported at once,
// in words meant for the model that sent the arguments, in an error
// wrapping ErrInvalidArguments.
func ParseArgs(tool string, raw json.RawMessage) (Args, error) {
	a := Args{
		strings: map[string]string{},
		ints:    map[string]int64{},
		bools:   map[string]bool{},
		ignored: []string{},
	}
	var obj map[string]json.RawMessage
	trimmed := bytes.TrimSpace(Unwrap(raw))
	if len(trimmed) > 0 && !bytes.Equal(trimmed, []byte("null")) {
		switch {
		case trimmed[0] == '"':
			return a, fmt.Errorf("%w for %s: arguments must be a JSON object; the string given does not hold one", ErrInvalidArguments, tool)
		case trimmed[0] != '{':
			return a, fmt.Errorf("%w for %s: arguments must be a JSON object", ErrInvalidArguments, tool)
		}
		if err := json.Unmarshal(trimmed, &obj); err != nil {
			return a, fmt.Errorf("%w for %s: arguments are not valid JSON: %v", ErrInvalidArguments, tool, err)
		}
	}
	declared := params[tool]
	for name := range obj {
		if !slices.ContainsFunc(declared, func(p param) bool { return p.name == name }) {
			a.ignored = append(a.ignored, name)
		}
	}
	slices.Sort(a.ignored)

	var problems []string
	for _, p := range declared {
		v, ok := obj[p.name]
		if !ok || bytes.Equal(bytes.TrimSpace(v), []byte("null")) {
			if p.required {
				problems = append(problems, p.name+" is required")
			}
			continue
		}
		if err := a.decode(p, v); err != "" {
			problems = append(problems, err)
		}
	}
	if len(problems) > 0 {
		return a, fmt.Errorf("%w for %s: %s", ErrInvalidArguments, tool, strings.Join(problems, "; "))
	}
	return a, nil
}

// decode stores v as p's value, or returns a description of the problem.
func (a Args) decode(p param, v json.RawMessage) string {
	bad := fmt.Sprintf("%s must be %s", p.name, p.kind)
	switch p.kind {
	case kindString:
		var s string
		if err := json.Unmarshal(v, &s); err != nil {
			return bad
		}
		if p.required && !p.empty && strings.TrimSpace(s) == "" {
			return p.name + " must not be empty"
		}
		if p.oneOf != nil && !slices.Contains(p.oneOf, s) {
			return fmt.Sprintf("%s must be one of %s", p.name, strings.Join(p.oneOf, ", "))
		}
		a.strings[p.name] = s
	case kindInteger:
		// Accept any JSON number with an integral value (5000 and 5000.0).
		var f float64
		if err := json.Unmarshal(v, &f); err != nil || f != math.Trunc(f) || f < 0 || f > maxInteger {
			return bad
		}
		a.ints[p.name] = int64(f)
	case kindBool:
		var b bool
		if err := json.Unmarshal(v, &b); err != nil {
			return bad
		}
		a.bools[p.name] = b
	}
	return ""
}
