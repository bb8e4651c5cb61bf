package tests

import (
	"os"
	"path/filepath"
	"testing"
)

// TestExecSandboxLimitsValidation: an invalid sandbox policy or invalid
// limits are refused with the same problem code on POST /exec, without an
// agent and with one, and on the routes that set the bounds of an agent's
// tool calls (POST /agents, spawn); the tool route itself takes neither
// from the model: the same fields among a bash call's arguments are
// ignored and the call runs within its agent's bounds. Nothing runs for a
// refused request.
func TestExecSandboxLimitsValidation(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	dir := t.TempDir()
	var a agent
	if st := s.DoJSON(t, "POST", "/agents", map[string]any{"cwd": dir}, &a); st != 201 {
		t.Fatalf("POST /agents = %d", st)
	}
	marker := filepath.Join(dir, "ran")
	for _, tc := range []struct {
		name   string
		field  string
		value  any
		status int
		code   string
	}{
		// Past the contract's schema, refused by the pipeline's one check.
		{"allow with network off", "sandbox", map[string]any{"network": "off", "allow": []string{"web.test"}}, 422, "invalid_sandbox"},
		{"allow alone where the network is on", "sandbox", map[string]any{"allow": []string{"web.test"}}, 422, "invalid_sandbox"},
		{"a malformed allowlist entry", "sandbox", map[string]any{"network": "allowlist", "allow": []string{"web.test:99999"}}, 422, "invalid_sandbox"},
		// Refused by the contract's schema first.
		{"unknown file policy", "sandbox", map[string]any{"policy": "bogus"}, 400, "bad_request"},
		{"negative pids", "limits", map[string]any{"pids": -1}, 400, "bad_request"},
	} {
		for _, route := range []struct {
			path string
			body map[string]any
		}{
			{"/exec", map[string]any{"command": "touch " + marker}},
			{"/exec", map[string]any{"command": "touch " + marker, "agentId": a.ID}},
			{"/agents", map[string]any{"cwd": dir}},
			{"/agents/" + a.ID + "/spawn", map[string]any{}},
		} {
			route.body[tc.field] = tc.value
			var p problemCode
			if st := s.DoJSON(t, "POST", route.path, route.body, &p); st != tc.status || p.Code != tc.code {
				t.Errorf("%s: POST %s = %d %q (%s), want %d %q", tc.name, route.path, st, p.Code, p.Detail, tc.status, tc.code)
			}
		}
		// A model's arguments carry no policy: ignored, the call runs.
		r := s.callTool(t, a.ID, "bash", map[string]any{"command": "true", tc.field: tc.value})
		if r.IsError || r.ExitCode == nil || *r.ExitCode != 0 {
			t.Errorf("%s: a bash call naming it = %+v, want it ignored and the call run", tc.name, r)
		}
	}
	if _, err := os.Stat(marker); !os.IsNotExist(err) {
		t.Errorf("a refused request ran its command: stat %s = %v", marker, err)
	}
}
