package tools

import (
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/dshd/dshd/internal/golden"
	"github.com/dshd/dshd/internal/sandbox"
)

func TestRenderGolden(t *testing.T) {
	for _, tt := range []struct{ format, golden string }{
		{FormatGeneric, "tools.json"},
		{FormatOpenAI, "tools.openai.json"},
		{FormatOpenAIResponses, "tools.openai-responses.json"},
		{FormatOpenAIStrict, "tools.openai-strict.json"},
		{FormatAnthropic, "tools.anthropic.json"},
	} {
		t.Run(tt.golden, func(t *testing.T) {
			v, err := Render(Definitions(), tt.format)
			if err != nil {
				t.Fatalf("Render(%q): %v", tt.format, err)
			}
			got, err := json.MarshalIndent(v, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			golden.Compare(t, filepath.Join("testdata", tt.golden), append(got, '\n'))
		})
	}
}

func TestRenderShapes(t *testing.T) {
	defs := []Definition{{Name: "n", Description: "d", Schema: map[string]any{"type": "object"}}}
	tests := []struct {
		format string
		want   string
	}{
		{"", `[{"name":"n","description":"d","inputSchema":{"type":"object"}}]`},
		{"openai", `[{"type":"function","function":{"name":"n","description":"d","parameters":{"type":"object"}}}]`},
		{"anthropic", `[{"name":"n","description":"d","input_schema":{"type":"object"}}]`},
	}
	for _, tt := range tests {
		t.Run("format="+tt.format, func(t *testing.T) {
			v, err := Render(defs, tt.format)
			if err != nil {
				t.Fatal(err)
			}
			got, _ := json.Marshal(v)
			if diff := cmp.Diff(tt.want, string(got)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestRenderUnknownFormat(t *testing.T) {
	for _, f := range []string{"OpenAI", "gemini", " "} {
		if _, err := Render(Definitions(), f); !errors.Is(err, ErrUnknownFormat) {
			t.Errorf("Render(%q) error = %v, want ErrUnknownFormat", f, err)
		}
	}
}

func TestDefinitions(t *testing.T) {
	defs := Definitions()
	var names []string
	for _, d := range defs {
		names = append(names, d.Name)
		if d.Description == "" || d.Schema["type"] != "object" {
			t.Errorf("%s: want a description and an object schema", d.Name)
		}
	}
	if diff := cmp.Diff([]string{"bash", "job_output", "job_list", "job_kill", "write_stdin", "read_file", "write_file", "edit_file", "apply_patch"}, names); diff != "" {
		t.Errorf("names (-want +got):\n%s", diff)
	}

	// The bash description teaches the durable convention and nothing about
	// persistence.
	bash := defs[0].Description
	for _, want := range []string{"$DSH_SESSION_ID", "$DSH_HOME", "env | grep ^DSH_", "bash -c", "non-interactive", "workdir", "`cd`", "run_in_background", "job_output", "tty", "write_stdin"} {
		if !strings.Contains(bash, want) {
			t.Errorf("bash description lacks %q", want)
		}
	}
	for _, d := range defs {
		for _, banned := range []string{"JSONL", "jsonl", "transcript", "Transcript"} {
			if strings.Contains(d.Description, banned) {
				t.Errorf("%s description mentions %q", d.Name, banned)
			}
		}
	}

	// Callers may modify what they get without affecting later calls.
	defs[0].Schema["properties"].(map[string]any)["command"] = nil
	if Definitions()[0].Schema["properties"].(map[string]any)["command"] == nil {
		t.Error("Definitions shares state between calls")
	}
}

// TestDescriptionsFit: tool and argument descriptions stay within 1,024
// characters, the limit several clients and proxies enforce.
func TestDescriptionsFit(t *testing.T) {
	var defs []Definition
	for _, fs := range []sandbox.FS{sandbox.Unrestricted, sandbox.WorkspaceWrite, sandbox.ReadOnly} {
		for _, n := range []sandbox.Network{sandbox.NetworkOn, sandbox.NetworkAllowlist, sandbox.NetworkOff} {
			p := sandbox.Policy{FS: fs, Network: n}
			if n == sandbox.NetworkAllowlist {
				p.Allow = sandbox.MustHosts("a-rather-long-host-name.registry.example.com:443", "*.githubusercontent.example.org")
			}
			got := DefinitionsFor(p)
			if !strings.HasSuffix(got[0].Description, p.Sentence()) {
				t.Errorf("bash description for %s does not end with its sentence %q", p, p.Sentence())
			}
			defs = append(defs, got...)
		}
	}
	for _, d := range defs {
		if n := len([]rune(d.Description)); n > 1024 {
			t.Errorf("%s description is %d characters, want at most 1024", d.Name, n)
		}
		props, _ := d.Schema["properties"].(map[string]any)
		for name, p := range props {
			desc, _ := p.(map[string]any)["description"].(string)
			if n := len([]rune(desc)); n > 1024 {
				t.Errorf("%s.%s description is %d characters, want at most 1024", d.Name, name, n)
			}
		}
	}
}

// TestStrictSchemas: the Responses rendering and the strict Chat
// Completions rendering are strict and their schemas meet strict mode:
// every property required, optional ones nullable, nothing else allowed,
// only keywords strict mode supports; and null is what ParseArgs takes as
// absent.
func TestStrictSchemas(t *testing.T) {
	type strictTool struct {
		name   string
		strict bool
		params map[string]any
	}
	var rendered []strictTool
	v, err := Render(Definitions(), FormatOpenAIResponses)
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range v.([]openAIResponsesTool) {
		if tool.Type != "function" {
			t.Errorf("%s: type %q", tool.Name, tool.Type)
		}
		rendered = append(rendered, strictTool{"responses " + tool.Name, tool.Strict, tool.Parameters})
	}
	v, err = Render(Definitions(), FormatOpenAIStrict)
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range v.([]openAITool) {
		if tool.Type != "function" {
			t.Errorf("%s: type %q", tool.Function.Name, tool.Type)
		}
		rendered = append(rendered, strictTool{"chat " + tool.Function.Name, tool.Function.Strict, tool.Function.Parameters})
	}
	if len(rendered) != 2*len(Definitions()) {
		t.Fatalf("%d strict tools rendered, want %d", len(rendered), 2*len(Definitions()))
	}
	for _, tool := range rendered {
		_, name, _ := strings.Cut(tool.name, " ")
		if !tool.strict {
			t.Errorf("%s: not strict", tool.name)
		}
		p := tool.params
		checkStrictKeywords(t, tool.name, p)
		props := p["properties"].(map[string]any)
		req := p["required"].([]any)
		if len(req) != len(props) || p["additionalProperties"] != false {
			t.Errorf("%s: required %v of %d properties, additionalProperties %v", tool.name, req, len(props), p["additionalProperties"])
		}
		nulls := map[string]any{}
		for _, param := range params[name] {
			typ := props[param.name].(map[string]any)["type"]
			if param.required {
				if typ != param.kind.jsonType() {
					t.Errorf("%s.%s: type %v, want %s", tool.name, param.name, typ, param.kind.jsonType())
				}
				continue
			}
			if !cmp.Equal(typ, []any{param.kind.jsonType(), "null"}) {
				t.Errorf("%s.%s: type %v, want nullable %s", tool.name, param.name, typ, param.kind.jsonType())
			}
			nulls[param.name] = nil
		}
		// A strict model sends null for what it leaves out.
		for _, param := range params[name] {
			if param.required {
				nulls[param.name] = map[kind]any{kindString: "x", kindInteger: 1, kindBool: true}[param.kind]
			}
		}
		raw, _ := json.Marshal(nulls)
		if _, err := ParseArgs(name, raw); err != nil {
			t.Errorf("%s: a strict call with nulls %s is refused: %v", tool.name, raw, err)
		}
	}
	// The generic definitions are unchanged by the strict rendering.
	if _, ok := Definitions()[0].Schema["properties"].(map[string]any)["timeout"].(map[string]any)["type"].(string); !ok {
		t.Error("strictSchema changed the definitions it was given")
	}
	// The plain Chat Completions rendering says nothing of strict.
	v, err = Render(Definitions(), FormatOpenAI)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(v)
	if strings.Contains(string(b), `"strict"`) {
		t.Errorf("the openai format says strict: %s", b)
	}
}

// strictKeywords are the JSON Schema keywords OpenAI's strict mode (the
// Structured Outputs subset) supports in a function's parameters.
var strictKeywords = map[string]bool{
	"type": true, "description": true, "properties": true, "required": true, "additionalProperties": true,
	"enum": true, "const": true, "items": true, "anyOf": true, "$ref": true, "$defs": true,
	"pattern": true, "format": true, "minimum": true, "maximum": true, "exclusiveMinimum": true,
	"exclusiveMaximum": true, "multipleOf": true, "minItems": true, "maxItems": true,
}

// checkStrictKeywords fails for a keyword strict mode rejects, anywhere in
// schema, and for an object schema that allows other properties.
func checkStrictKeywords(t *testing.T, where string, schema map[string]any) {
	t.Helper()
	for k, v := range schema {
		if !strictKeywords[k] {
			t.Errorf("%s: keyword %q is not supported in strict mode", where, k)
		}
		switch k {
		case "properties":
			for name, p := range v.(map[string]any) {
				if ps, ok := p.(map[string]any); ok {
					checkStrictKeywords(t, where+"."+name, ps)
				}
			}
		case "items":
			if ps, ok := v.(map[string]any); ok {
				checkStrictKeywords(t, where+"[]", ps)
			}
		}
	}
	if schema["type"] == "object" && schema["additionalProperties"] != false {
		t.Errorf("%s: an object schema without additionalProperties false", where)
	}
}

// TestHintsFollowPolicy: bash and write_stdin are read-only only when the
// policy makes them so, destructive while a file system is writable, and
// open-world while the network is on; the job tools do not depend on it.
func TestHintsFollowPolicy(t *testing.T) {
	cases := []struct {
		policy     sandbox.Policy
		shell, job Hints // bash and write_stdin; job_list and job_output
	}{
		{sandbox.Default, Hints{Destructive: true, OpenWorld: true}, Hints{ReadOnly: true, Idempotent: true}},
		{sandbox.Policy{FS: sandbox.WorkspaceWrite, Network: sandbox.NetworkOff}, Hints{Destructive: true}, Hints{ReadOnly: true, Idempotent: true}},
		{sandbox.Policy{FS: sandbox.ReadOnly, Network: sandbox.NetworkOn}, Hints{OpenWorld: true}, Hints{ReadOnly: true, Idempotent: true}},
		{sandbox.Policy{FS: sandbox.ReadOnly, Network: sandbox.NetworkOff}, Hints{ReadOnly: true}, Hints{ReadOnly: true, Idempotent: true}},
	}
	for _, c := range cases {
		for _, d := range DefinitionsFor(c.policy) {
			want := c.job
			switch d.Name {
			case ToolBash, ToolWriteStdin:
				want = c.shell
			case ToolJobKill:
				want = Hints{Destructive: true, Idempotent: true}
			case ToolWriteFile, ToolEditFile, ToolApplyPatch:
				// They write where commands may: nowhere under read-only.
				want = Hints{Destructive: true, Idempotent: d.Name == ToolWriteFile}
				if c.policy.FS == sandbox.ReadOnly {
					want = Hints{ReadOnly: true, Idempotent: true}
				}
			}
			if d.Hints != want || d.Title == "" {
				t.Errorf("%s under %s: title %q, hints %+v, want a title and %+v", d.Name, c.policy, d.Title, d.Hints, want)
			}
		}
	}
}
