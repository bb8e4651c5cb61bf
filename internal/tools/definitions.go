package tools

import (
	"errors"
	"fmt"
)

// Tool names, as the model sees them.
const (
	ToolBash      = "bash"
	ToolJobOutput = "job_output"
	ToolJobList   = "job_list"
	ToolJobKill   = "job_kill"
)

// Render formats accepted by Render.
const (
	FormatGeneric   = ""
	FormatOpenAI    = "openai"
	FormatAnthropic = "anthropic"
)

// ErrUnknownFormat is returned by Render for a format other than "",
// "openai" and "anthropic".
var ErrUnknownFormat = errors.New("unknown tool format")

// Definition describes one model-facing tool: its name, the description the
// model reads, and the JSON schema of its arguments.
type Definition struct {
	Name        string
	Description string
	Schema      map[string]any
}

// bashDescription stays within 1,024 characters: several clients and proxies
// reject longer tool descriptions (TestDescriptionsFit).
const bashDescription = `Run a bash command and return its output.

Each call is a fresh, non-interactive ` + "`bash -c`" + `: no shell state (variables, functions, current directory) carries over between calls. Use ` + "`workdir`" + ` rather than ` + "`cd`" + `. Standard input is empty.

Harness facts are in managed environment variables starting with DSH_, collected fresh for each call: read them rather than guess. $DSH_SESSION_ID is your own agent (session) id, $DSH_HOME the harness home; list all with ` + "`env | grep ^DSH_`" + `.

Foreground calls wait up to timeoutMs (a server default applies when omitted). For long-running commands set run_in_background: the call returns a job id at once; use job_output to read it, job_list to list your jobs, job_kill to stop one.

The result is stdout, then [stderr] and stderr, then markers on their own lines such as [exit code: N], [timed out after Nms] or [killed by signal: S]. Long output keeps its head and tail and says where the rest is.`

// Definitions returns the model-facing tools — bash, job_output, job_list and
// job_kill — in that order. Every call returns fresh values that the caller
// may modify.
func Definitions() []Definition {
	return []Definition{
		{
			Name:        ToolBash,
			Description: bashDescription,
			Schema: objectSchema([]string{"command"}, map[string]any{
				"command": map[string]any{
					"type":        "string",
					"description": "The bash command to run.",
				},
				"description": map[string]any{
					"type":        "string",
					"description": "A short description (5-10 words) of what the command does.",
				},
				"timeoutMs": map[string]any{
					"type":        "integer",
					"minimum":     1,
					"description": "Foreground timeout in milliseconds. The command's process group is stopped when it expires.",
				},
				"workdir": map[string]any{
					"type":        "string",
					"description": "Directory to run the command in; relative paths are resolved against your working directory. Defaults to your working directory.",
				},
				"run_in_background": map[string]any{
					"type":        "boolean",
					"description": "Start the command as a background job and return its job id at once. Use job_output to read its output.",
				},
			}),
		},
		{
			Name:        ToolJobOutput,
			Description: "Read the output and state of one of your jobs (as started by bash with run_in_background). With waitMs, wait up to that many milliseconds for the job to finish first.",
			Schema: objectSchema([]string{"jobId"}, map[string]any{
				"jobId": map[string]any{
					"type":        "string",
					"description": "The job id returned when the job was started.",
				},
				"waitMs": map[string]any{
					"type":        "integer",
					"minimum":     0,
					"description": "Wait up to this many milliseconds for the job to finish before reading its output. 0 or omitted: do not wait.",
				},
			}),
		},
		{
			Name:        ToolJobList,
			Description: "List your jobs, oldest first: id, state, exit status, whether it runs in the background, and the command.",
			Schema: objectSchema(nil, map[string]any{
				"state": map[string]any{
					"type":        "string",
					"enum":        []any{"running", "exited", "timed_out", "cancelled", "lost"},
					"description": "Only list jobs in this state.",
				},
			}),
		},
		{
			Name:        ToolJobKill,
			Description: "Stop one of your running jobs: its whole process group receives SIGTERM, then SIGKILL after a grace period.",
			Schema: objectSchema([]string{"jobId"}, map[string]any{
				"jobId": map[string]any{
					"type":        "string",
					"description": "The id of the job to stop.",
				},
			}),
		},
	}
}

func objectSchema(required []string, props map[string]any) map[string]any {
	s := map[string]any{
		"type":                 "object",
		"properties":           props,
		"additionalProperties": false,
	}
	if len(required) > 0 {
		req := make([]any, len(required))
		for i, r := range required {
			req[i] = r
		}
		s["required"] = req
	}
	return s
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
	case FormatAnthropic:
		out := make([]anthropicTool, len(defs))
		for i, d := range defs {
			out[i] = anthropicTool{Name: d.Name, Description: d.Description, InputSchema: d.Schema}
		}
		return out, nil
	default:
		return nil, fmt.Errorf("%w %q (want \"\", %q or %q)", ErrUnknownFormat, format, FormatOpenAI, FormatAnthropic)
	}
}
