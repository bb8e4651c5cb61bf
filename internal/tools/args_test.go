package tools

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseArgs(t *testing.T) {
	tests := []struct {
		name        string
		tool        string
		raw         string
		wantStrings map[string]string
		wantInts    map[string]int64
		wantBools   map[string]bool
		wantIgnored []string
		wantErr     []string // substrings of an ErrInvalidArguments message; nil = no error
	}{
		{
			name:        "bash command only",
			tool:        ToolBash,
			raw:         `{"command":"echo hi"}`,
			wantStrings: map[string]string{"command": "echo hi"},
			wantIgnored: []string{},
		},
		{
			name:        "bash every declared argument",
			tool:        ToolBash,
			raw:         `{"command":"ls","description":"list","timeout":5000,"workdir":"/tmp","run_in_background":true}`,
			wantStrings: map[string]string{"command": "ls", "description": "list", "workdir": "/tmp"},
			wantInts:    map[string]int64{"timeout": 5000},
			wantBools:   map[string]bool{"run_in_background": true},
			wantIgnored: []string{},
		},
		{
			name:        "env and stdin are ignored, sorted with the rest",
			tool:        ToolBash,
			raw:         `{"stdin":"y","command":"cat","env":{"FOO":"x","DSH_SESSION_ID":"forged"},"cwd":"/","timeoutMs":3}`,
			wantStrings: map[string]string{"command": "cat"},
			wantIgnored: []string{"cwd", "env", "stdin", "timeoutMs"},
		},
		{
			name:        "write_file: content may be empty, file_path may not",
			tool:        ToolWriteFile,
			raw:         `{"file_path":" ","content":""}`,
			wantIgnored: []string{},
			wantErr:     []string{"file_path must not be empty"},
		},
		{
			name:        "edit_file: empty strings are strings",
			tool:        ToolEditFile,
			raw:         `{"file_path":"a.txt","old_string":"","new_string":"","replace_all":true}`,
			wantStrings: map[string]string{"file_path": "a.txt", "old_string": "", "new_string": ""},
			wantBools:   map[string]bool{"replace_all": true},
			wantIgnored: []string{},
		},
		{
			name:        "edit_file: new_string must be given",
			tool:        ToolEditFile,
			raw:         `{"file_path":"a.txt","old_string":"x"}`,
			wantIgnored: []string{},
			wantErr:     []string{"new_string is required"},
		},
		{
			name:        "apply_patch: Codex's input",
			tool:        ToolApplyPatch,
			raw:         `{"input":"*** Begin Patch\n*** End Patch","patch":"x"}`,
			wantStrings: map[string]string{"input": "*** Begin Patch\n*** End Patch"},
			wantIgnored: []string{"patch"},
		},
		{
			name:        "integral float accepted",
			tool:        ToolBash,
			raw:         `{"command":"true","timeout":1500.0}`,
			wantStrings: map[string]string{"command": "true"},
			wantInts:    map[string]int64{"timeout": 1500},
			wantIgnored: []string{},
		},
		{
			name:        "null optional is absent",
			tool:        ToolBash,
			raw:         `{"command":"true","workdir":null,"timeout":null}`,
			wantStrings: map[string]string{"command": "true"},
			wantIgnored: []string{},
		},
		{
			name:        "job_list without arguments",
			tool:        ToolJobList,
			raw:         ``,
			wantIgnored: []string{},
		},
		{
			name:        "job_list null arguments",
			tool:        ToolJobList,
			raw:         `null`,
			wantIgnored: []string{},
		},
		{
			name:        "job_list state",
			tool:        ToolJobList,
			raw:         `{"state":"running"}`,
			wantStrings: map[string]string{"state": "running"},
			wantIgnored: []string{},
		},
		{
			name:        "job_output with wait",
			tool:        ToolJobOutput,
			raw:         `{"jobId":"job_1","waitMs":0,"extra":1}`,
			wantStrings: map[string]string{"jobId": "job_1"},
			wantInts:    map[string]int64{"waitMs": 0},
			wantIgnored: []string{"extra"},
		},
		{name: "missing command", tool: ToolBash, raw: `{}`, wantErr: []string{"bash", "command is required"}},
		{name: "null command", tool: ToolBash, raw: `{"command":null}`, wantErr: []string{"command is required"}},
		{name: "blank command", tool: ToolBash, raw: `{"command":"  "}`, wantErr: []string{"command must not be empty"}},
		{name: "command not a string", tool: ToolBash, raw: `{"command":["ls"]}`, wantErr: []string{"command must be a string"}},
		{name: "timeout as string", tool: ToolBash, raw: `{"command":"ls","timeout":"5000"}`, wantErr: []string{"timeout must be a non-negative integer"}},
		{name: "timeout fractional", tool: ToolBash, raw: `{"command":"ls","timeout":1.5}`, wantErr: []string{"timeout must be a non-negative integer"}},
		{name: "timeout negative", tool: ToolBash, raw: `{"command":"ls","timeout":-1}`, wantErr: []string{"timeout must be a non-negative integer"}},
		{name: "timeout huge", tool: ToolBash, raw: `{"command":"ls","timeout":1e300}`, wantErr: []string{"timeout must be a non-negative integer"}},
		{name: "background as string", tool: ToolBash, raw: `{"command":"ls","run_in_background":"true"}`, wantErr: []string{"run_in_background must be a boolean"}},
		{
			name:    "every problem at once",
			tool:    ToolBash,
			raw:     `{"workdir":1,"run_in_background":1}`,
			wantErr: []string{"command is required", "workdir must be a string", "run_in_background must be a boolean"},
		},
		{name: "not an object", tool: ToolBash, raw: `["ls"]`, wantErr: []string{"must be a JSON object"}},
		{name: "string arguments", tool: ToolBash, raw: `"ls"`, wantErr: []string{"must be a JSON object", "does not hold one"}},
		{name: "string holding an array", tool: ToolBash, raw: `"[1]"`, wantErr: []string{"must be a JSON object"}},
		{name: "string holding broken JSON", tool: ToolBash, raw: `"{\"command\":"`, wantErr: []string{"must be a JSON object"}},
		{name: "string holding a bad object", tool: ToolBash, raw: `"{\"command\":\"\"}"`, wantErr: []string{"command must not be empty"}},
		{
			name:        "string holding an object (OpenAI)",
			tool:        ToolBash,
			raw:         `"{\"command\":\"echo hi\",\"timeout\":5000,\"x\":1}"`,
			wantStrings: map[string]string{"command": "echo hi"},
			wantInts:    map[string]int64{"timeout": 5000},
			wantIgnored: []string{"x"},
		},
		{name: "broken JSON", tool: ToolBash, raw: `{"command":`, wantErr: []string{"not valid JSON"}},
		{name: "job_output missing id", tool: ToolJobOutput, raw: `{"waitMs":10}`, wantErr: []string{"jobId is required"}},
		{name: "job_kill id not a string", tool: ToolJobKill, raw: `{"jobId":7}`, wantErr: []string{"jobId must be a string"}},
		{name: "job_list unknown state", tool: ToolJobList, raw: `{"state":"zombie"}`, wantErr: []string{"state must be one of running, exited, timed_out, cancelled"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseArgs(tt.tool, json.RawMessage(tt.raw))
			if tt.wantErr != nil {
				if !errors.Is(err, ErrInvalidArguments) {
					t.Fatalf("parseArgs error = %v, want ErrInvalidArguments", err)
				}
				for _, sub := range tt.wantErr {
					if !strings.Contains(err.Error(), sub) {
						t.Errorf("error %q does not mention %q", err, sub)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("parseArgs: %v", err)
			}
			orEmpty := func(m any) any {
				switch m := m.(type) {
				case map[string]string:
					if m == nil {
						return map[string]string{}
					}
				case map[string]int64:
					if m == nil {
						return map[string]int64{}
					}
				case map[string]bool:
					if m == nil {
						return map[string]bool{}
					}
				}
				return m
			}
			if diff := cmp.Diff(orEmpty(tt.wantStrings), any(got.strings)); diff != "" {
				t.Errorf("strings (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(orEmpty(tt.wantInts), any(got.ints)); diff != "" {
				t.Errorf("ints (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(orEmpty(tt.wantBools), any(got.bools)); diff != "" {
				t.Errorf("bools (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantIgnored, got.ignored); diff != "" {
				t.Errorf("ignored (-want +got):\n%s", diff)
			}
		})
	}
}

// TestParamsMatchSchemas keeps the argument rules and the advertised JSON
// schemas from drifting apart.
func TestParamsMatchSchemas(t *testing.T) {
	for _, d := range Definitions() {
		props := d.Schema["properties"].(map[string]any)
		var declared []string
		for _, p := range params[d.Name] {
			declared = append(declared, p.name)
			prop, ok := props[p.name].(map[string]any)
			if !ok {
				t.Errorf("%s: %s is declared but not in the schema", d.Name, p.name)
				continue
			}
			wantType := map[kind]string{kindString: "string", kindInteger: "integer", kindBool: "boolean"}[p.kind]
			if prop["type"] != wantType {
				t.Errorf("%s.%s: schema type %v, rule %s", d.Name, p.name, prop["type"], wantType)
			}
			if p.required != schemaRequires(d.Schema, p.name) {
				t.Errorf("%s.%s: required in rules %v, in schema %v", d.Name, p.name, p.required, !p.required)
			}
		}
		if len(declared) != len(props) {
			t.Errorf("%s: rules declare %v, schema has %d properties", d.Name, declared, len(props))
		}
	}
}

func schemaRequires(schema map[string]any, name string) bool {
	req, _ := schema["required"].([]any)
	for _, r := range req {
		if r == name {
			return true
		}
	}
	return false
}
