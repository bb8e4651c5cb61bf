package tools

import (
	"errors"
	"fmt"
	"sort"

	"github.com/dshd/dshd/internal/sandbox"
	"github.com/dshd/dshd/internal/shellenv"
)

// Tool names, as the model sees them.
const (
	ToolBash      = "bash"
	ToolJobOutput = "job_output"
	ToolJobList   = "job_list"
	ToolJobKill   = "job_kill"
	// ToolWriteStdin is Codex's unified exec tool of that name: write to a
	// running job and read what it printed since the last read.
	ToolWriteStdin = "write_stdin"
	// The file tools, with the argument names Claude Code's Read, Write
	// and Edit and Codex's apply_patch taught the models.
	ToolReadFile   = "read_file"
	ToolWriteFile  = "write_file"
	ToolEditFile   = "edit_file"
	ToolApplyPatch = "apply_patch"
)

// Render formats accepted by Render.
const (
	FormatGeneric = ""
	FormatOpenAI  = "openai"
	// FormatOpenAIResponses is the Responses API's function tools, strict.
	FormatOpenAIResponses = "openai-responses"
	// FormatOpenAIStrict is Chat Completions function tools in strict mode:
	// the schemas of FormatOpenAIResponses, "strict": true in each function.
	FormatOpenAIStrict = "openai-strict"
	FormatAnthropic    = "anthropic"
)

// ErrUnknownFormat is returned by Render for a format other than those
// above.
var ErrUnknownFormat = errors.New("unknown tool format")

// Definition describes one model-facing tool: its name, the description the
// model reads, and the JSON schema of its arguments.
type Definition struct {
	Name        string
	Description string
	Schema      map[string]any
	// Title is a short human-readable name, for clients that show one.
	Title string
	// Hints say what calling the tool can do, for clients that decide by
	// them whether to ask their user first (MCP tool annotations). They
	// describe the tool under the policy the definitions were made for.
	Hints Hints
}

// Hints are a tool's behaviour hints (MCP's tool annotations). Each is
// decided for the worst call the tool allows, never for a typical one.
type Hints struct {
	// ReadOnly: no call changes anything outside the call's own scratch.
	ReadOnly bool
	// Destructive: a call may delete or overwrite what was there, or stop
	// work in progress. Meaningful only when not ReadOnly.
	Destructive bool
	// Idempotent: repeating a call with the same arguments has no further
	// effect.
	Idempotent bool
	// OpenWorld: a call may reach beyond this host (the network).
	OpenWorld bool
}

// hintsFor are the hints of each tool under policy. bash and write_stdin
// run (or type into) arbitrary commands: they are read-only only when the
// file system is read-only and the network is off, destructive whenever a
// file system is writable, never idempotent, and open-world whenever the
// network is on. job_output and job_list only read dshd's own state;
// job_kill stops processes (destructive), and stopping a stopped job again
// changes nothing (idempotent).
func hintsFor(name string, policy sandbox.Policy) Hints {
	switch name {
	case ToolBash, ToolWriteStdin:
		confinedFS := policy.FS == sandbox.ReadOnly
		offline := policy.Network == sandbox.NetworkOff
		return Hints{
			ReadOnly:    confinedFS && offline,
			Destructive: !confinedFS,
			OpenWorld:   !offline,
		}
	case ToolJobOutput, ToolJobList:
		return Hints{ReadOnly: true, Idempotent: true}
	case ToolJobKill:
		return Hints{Destructive: true, Idempotent: true}
	case ToolReadFile:
		return Hints{ReadOnly: true, Idempotent: true}
	case ToolWriteFile, ToolEditFile, ToolApplyPatch:
		// They write where the agent's commands may write: nowhere under
		// a read-only file system. Writing the same content twice is
		// writing it once; an edit or a patch applied twice is not.
		if policy.FS == sandbox.ReadOnly {
			return Hints{ReadOnly: true, Idempotent: true}
		}
		return Hints{Destructive: true, Idempotent: name == ToolWriteFile}
	}
	return Hints{Destructive: true, OpenWorld: true} // an unknown tool: assume the worst
}

// bashDescription stays within 1,024 characters: several clients and proxies
// reject longer tool descriptions (TestDescriptionsFit). The managed names it
// spells come from shellenv's constants, so the guidance cannot drift from
// the namespace.
const bashDescription = `Run a bash command and return its output.

Each call is a fresh, non-interactive ` + "`bash -c`" + `: no shell state (variables, functions, current directory) carries over between calls. Use ` + "`workdir`" + ` rather than ` + "`cd`" + `. Standard input is empty.

Harness facts are in managed ` + shellenv.Prefix + `* environment variables, fresh for each call: read them rather than guess. $` + shellenv.KeySessionID + ` is your own agent (session) id, $` + shellenv.KeyHome + ` the harness home; list all with ` + "`env | grep ^" + shellenv.Prefix + "`" + `.

Foreground calls wait up to timeout ms. For long-running commands set run_in_background: you get a job id at once; job_output reads it, job_list lists your jobs, job_kill stops one. For REPLs and prompts set tty: the call returns after yield_time_ms with the job id if the command still runs; write_stdin types into it.

The result is stdout, then [stderr] and stderr, then markers such as [exit code: N] or [timed out after Nms]. Long output keeps its head and tail.`

// writeStdinDescription is the write_stdin tool's description: Codex's
// unified exec tool of that name, whose arguments models know.
const writeStdinDescription = `Write characters to one of your running jobs (a bash call with tty that returned its job id while still running) and return the output it printed since your last read.

session_id is the job id. chars is typed as is: end a line with "\n", send Ctrl-C as "\u0003", Ctrl-D as "\u0004". Empty chars only polls for new output. The call waits yield_time_ms (default 250; 5000 when polling; at most 30000) or until the job ends, then returns the new output (at most about max_output_tokens tokens, keeping head and tail), then [still running: job <id>] or how the job ended.`

// jobOutputDescription is the job_output tool's description: every byte
// of a job's output is reachable through it.
var jobOutputDescription = fmt.Sprintf(`Read the output and state of one of your jobs (a bash call's job id). With waitMs, wait up to that many milliseconds for the job to finish first.

Without range arguments you get its output as bash shows it: long output keeps its head and tail. To read any part of a stream, use one of: offset (and length) for bytes; start_line (and line_count) for whole lines, numbered from 1; tail_lines for the last lines; pattern for the lines that match a regular expression, with their numbers (from start_line on, at most line_count). stream picks stdout (default) or stderr.

A result holds at most %d bytes of output and ends with a line saying what it showed and the call that reads on.`, MaxReadBytes)

// Definitions returns the model-facing tools — bash, job_output, job_list,
// job_kill, write_stdin, read_file, write_file, edit_file and apply_patch —
// in that order. Every call returns fresh values that the caller
// may modify. The argument schemas are made from the argument rules
// (params), the one source of both.
//
// The bash description ends with the sentence that states the default
// sandbox policy (sandbox.Default); DefinitionsFor states another.
func Definitions() []Definition { return DefinitionsFor(sandbox.Default) }

// DefinitionsFor is Definitions with the bash description stating policy,
// the one the model's commands run under, so it does not waste turns.
func DefinitionsFor(policy sandbox.Policy) []Definition {
	defs := []Definition{
		{Name: ToolBash, Description: bashDescription + "\n\n" + policy.Sentence(), Schema: argumentsSchema(ToolBash)},
		{
			Name:        ToolJobOutput,
			Description: jobOutputDescription,
			Schema:      argumentsSchema(ToolJobOutput),
		},
		{
			Name:        ToolJobList,
			Description: "List your jobs, oldest first: id, state, exit status, whether it runs in the background, and the command.",
			Schema:      argumentsSchema(ToolJobList),
		},
		{
			Name:        ToolJobKill,
			Description: "Stop one of your running jobs, or what a finished one left running (job_list shows it): its processes receive SIGTERM, then SIGKILL after a grace period.",
			Schema:      argumentsSchema(ToolJobKill),
		},
		{Name: ToolWriteStdin, Description: writeStdinDescription, Schema: argumentsSchema(ToolWriteStdin)},
		{Name: ToolReadFile, Description: readFileDescription, Schema: argumentsSchema(ToolReadFile)},
		{Name: ToolWriteFile, Description: writeFileDescription, Schema: argumentsSchema(ToolWriteFile)},
		{Name: ToolEditFile, Description: editFileDescription, Schema: argumentsSchema(ToolEditFile)},
		{Name: ToolApplyPatch, Description: applyPatchDescription, Schema: argumentsSchema(ToolApplyPatch)},
	}
	for i := range defs {
		defs[i].Title = titles[defs[i].Name]
		defs[i].Hints = hintsFor(defs[i].Name, policy.Or(sandbox.Default))
	}
	return defs
}

// titles are the tools' human-readable names.
var titles = map[string]string{
	ToolBash:       "Run a shell command",
	ToolJobOutput:  "Read a job's output",
	ToolJobList:    "List jobs",
	ToolJobKill:    "Stop a job",
	ToolWriteStdin: "Type into a running job",
	ToolReadFile:   "Read a file",
	ToolWriteFile:  "Write a file",
	ToolEditFile:   "Edit a file",
	ToolApplyPatch: "Apply a patch",
}

// genericTool is the format-neutral rendering of a Definition.
type genericTool struct {
	Name        string         `json:"name"`
	Description string         `json:"description"`
	InputSchema map[string]any `json:"inputSchema"`
}

// openAITool is OpenAI's function tool format.
type openAITool struct {
	Type     string         `json:"type"`
	Function openAIFunction `json:"function"`
}

type openAIFunction struct {
	Name        string         `json:"name"`
	Description string         `json:"description"`
	Parameters  map[string]any `json:"parameters"`
	// Strict is set, to true, in the strict rendering only.
	Strict bool `json:"strict,omitempty"`
}

// openAIResponsesTool is the Responses API's function tool format.
type openAIResponsesTool struct {
	Type        string         `json:"type"`
	Name        string         `json:"name"`
	Description string         `json:"description"`
	Parameters  map[string]any `json:"parameters"`
	Strict      bool           `json:"strict"`
}

// anthropicTool is Anthropic's client tool format.
type anthropicTool struct {
	Name        string         `json:"name"`
	Description string         `json:"description"`
	InputSchema map[string]any `json:"input_schema"`
}

// Render returns defs as a JSON-encodable value in the given format:
//   - "": [{name, description, inputSchema}]
//   - "openai": [{"type":"function","function":{name, description, parameters}}]
//   - "openai-responses": [{"type":"function", name, description, parameters, "strict":true}]
//     with parameters made ready for strict mode (strictSchema)
//   - "openai-strict": [{"type":"function","function":{name, description, parameters, "strict":true}}]
//     with the same strict parameters
//   - "anthropic": [{name, description, input_schema}]
//
// It returns an error wrapping ErrUnknownFormat for any other format.
func Render(defs []Definition, format string) (any, error) {
	switch format {
	case FormatGeneric:
		out := make([]genericTool, len(defs))
		for i, d := range defs {
			out[i] = genericTool{Name: d.Name, Description: d.Description, InputSchema: d.Schema}
		}
		return out, nil
	case FormatOpenAI:
		out := make([]openAITool, len(defs))
		for i, d := range defs {
			out[i] = openAITool{Type: "function", Function: openAIFunction{Name: d.Name, Description: d.Description, Parameters: d.Schema}}
		}
		return out, nil
	case FormatOpenAIStrict:
		out := make([]openAITool, len(defs))
		for i, d := range defs {
			out[i] = openAITool{Type: "function", Function: openAIFunction{Name: d.Name, Description: d.Description, Parameters: strictSchema(d.Schema), Strict: true}}
		}
		return out, nil
	case FormatOpenAIResponses:
		out := make([]openAIResponsesTool, len(defs))
		for i, d := range defs {
			out[i] = openAIResponsesTool{Type: "function", Name: d.Name, Description: d.Description, Parameters: strictSchema(d.Schema), Strict: true}
		}
		return out, nil
	case FormatAnthropic:
		out := make([]anthropicTool, len(defs))
		for i, d := range defs {
			out[i] = anthropicTool{Name: d.Name, Description: d.Description, InputSchema: d.Schema}
		}
		return out, nil
	default:
		return nil, fmt.Errorf("%w %q (want \"\", %q, %q, %q or %q)", ErrUnknownFormat, format, FormatOpenAI, FormatOpenAIStrict, FormatOpenAIResponses, FormatAnthropic)
	}
}

// strictSchema returns an object schema made ready for OpenAI's strict
// mode, which requires every property to be listed in required and allows
// no others: each optional property becomes nullable instead (its type gains
// "null", its enum null), and ParseArgs takes null as absent.
func strictSchema(s map[string]any) map[string]any {
	out := make(map[string]any, len(s)+2)
	for k, v := range s {
		out[k] = v
	}
	props, _ := s["properties"].(map[string]any)
	required := map[string]bool{}
	if req, ok := s["required"].([]any); ok {
		for _, r := range req {
			if name, ok := r.(string); ok {
				required[name] = true
			}
		}
	}
	names := make([]string, 0, len(props))
	for name := range props {
		names = append(names, name)
	}
	sort.Strings(names)
	strictProps := make(map[string]any, len(props))
	all := make([]any, 0, len(names))
	for _, name := range names {
		all = append(all, name)
		p, _ := props[name].(map[string]any)
		if required[name] || p == nil {
			strictProps[name] = props[name]
			continue
		}
		np := make(map[string]any, len(p))
		for k, v := range p {
			np[k] = v
		}
		if t, ok := p["type"].(string); ok {
			np["type"] = []any{t, "null"}
		}
		if enum, ok := p["enum"].([]any); ok {
			np["enum"] = append(append([]any(nil), enum...), nil)
		}
		strictProps[name] = np
	}
	out["properties"] = strictProps
	out["required"] = all
	out["additionalProperties"] = false
	return out
}
