package tests

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/dshd/dshd/internal/testenv"

	"github.com/dshd/dshd/internal/apitest"
)

type sandboxPolicy struct {
	Policy  string `json:"policy"`
	Network string `json:"network"`
}

type sandboxJob struct {
	ID       string         `json:"id"`
	State    string         `json:"state"`
	ExitCode *int           `json:"exitCode"`
	Stdout   output         `json:"stdout"`
	Stderr   output         `json:"stderr"`
	Sandbox  *sandboxPolicy `json:"sandbox"`
}

type sandboxAgent struct {
	ID      string         `json:"id"`
	Sandbox *sandboxPolicy `json:"sandbox"`
}

type healthSandbox struct {
	Details struct {
		Sandbox *struct {
			Policies  []string      `json:"policies"`
			Networks  []string      `json:"networks"`
			Default   sandboxPolicy `json:"default"`
			Mechanism string        `json:"mechanism"`
			Reason    string        `json:"reason"`
		} `json:"sandbox"`
	} `json:"details"`
}

type problemCode struct {
	Code   string `json:"code"`
	Detail string `json:"detail"`
}

// needSandbox skips (fails in CI, see testenv) when the server cannot enforce
// every policy on this host: bubblewrap missing or without namespaces, or
// (the namespaces mechanism) dshd not root or a kernel without Landlock
// ABI 6.
func needSandbox(t *testing.T, s *testServer) {
	t.Helper()
	var h healthSandbox
	if st := s.DoJSON(t, "GET", "/healthz", nil, &h); st != 200 || h.Details.Sandbox == nil {
		t.Fatalf("GET /healthz = %d, sandbox %+v", st, h.Details.Sandbox)
	}
	sb := h.Details.Sandbox
	if !slices.Contains(sb.Policies, "workspace-write") || !slices.Contains(sb.Networks, "off") {
		testenv.Need(t, "this host cannot enforce sandbox policies (bubblewrap needs `make deps`; namespaces need root and Landlock ABI 6): %s", sb.Reason)
	}
}

func (s *testServer) execSandboxed(t *testing.T, body map[string]any) sandboxJob {
	t.Helper()
	var j sandboxJob
	if st := s.DoJSON(t, "POST", "/exec", body, &j); st != 200 {
		t.Fatalf("POST /exec %v = %d", body, st)
	}
	return j
}

// TestSandboxPolicies runs the same commands through the real server under
// each policy: what may be written, what the dshd home shows, whether .git
// stays read-only, and whether a listener on 127.0.0.1 can be reached.
func TestSandboxPolicies(t *testing.T) {
	t.Parallel()
	for _, mech := range sandboxMechanisms {
		t.Run(mech, func(t *testing.T) { testSandboxPolicies(t, mech) })
	}
}

// sandboxMechanisms are the mechanisms every policy test runs under.
var sandboxMechanisms = []string{"namespaces", "bubblewrap"}

// startSandboxServer starts a server whose sandboxes use mech, and skips
// (fails in CI, see testenv) when the host cannot enforce every policy with it.
func startSandboxServer(t *testing.T, mech string) *testServer {
	t.Helper()
	testenv.SkipMechanism(t, mech)
	s := startServer(t, withConfig("sandbox:\n  mechanism: "+mech+"\n"))
	needSandbox(t, s)
	return s
}

func testSandboxPolicies(t *testing.T, mech string) {
	s := startSandboxServer(t, mech)

	ws := t.TempDir()
	if err := os.MkdirAll(filepath.Join(ws, ".git"), 0o755); err != nil {
		t.Fatal(err)
	}
	gitConfig := filepath.Join(ws, ".git", "config")
	if err := os.WriteFile(gitConfig, []byte("[core]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A repository nested in the workspace is protected as well.
	nestedConfig := filepath.Join(ws, "vendor", "lib", ".git", "config")
	if err := os.MkdirAll(filepath.Dir(nestedConfig), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(nestedConfig, []byte("[core]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	outside := t.TempDir()

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port

	for _, tc := range []struct {
		policy, network   string
		inside, outsideOK bool
		gitOK, tokenOK    bool
	}{
		{policy: "unrestricted", network: "on", inside: true, outsideOK: true, gitOK: true, tokenOK: true},
		{policy: "unrestricted", network: "off", inside: true, outsideOK: true, gitOK: true},
		{policy: "workspace-write", network: "on", inside: true},
		{policy: "workspace-write", network: "off", inside: true},
		{policy: "read-only", network: "on"},
		{policy: "read-only", network: "off"},
	} {
		name := tc.policy + "/" + tc.network
		t.Run(name, func(t *testing.T) {
			run := func(command string) sandboxJob {
				t.Helper()
				j := s.execSandboxed(t, map[string]any{"command": command, "cwd": ws,
					"sandbox": map[string]string{"policy": tc.policy, "network": tc.network}})
				if j.Sandbox == nil || j.Sandbox.Policy != tc.policy || j.Sandbox.Network != tc.network {
					t.Errorf("job sandbox = %+v, want %s", j.Sandbox, name)
				}
				return j
			}
			ok := func(j sandboxJob) bool { return j.State == "exited" && j.ExitCode != nil && *j.ExitCode == 0 }
			file := strings.NewReplacer("/", "-").Replace(name)

			j := run("echo inside > " + file + " && cat " + file)
			if ok(j) != tc.inside {
				t.Errorf("write in cwd: exit %v, stderr %q; want success %v", deref(j.ExitCode), j.Stderr.Text, tc.inside)
			}
			if !tc.inside && !strings.Contains(j.Stderr.Text, "Read-only file system") {
				t.Errorf("write in cwd under read-only: stderr %q, want the kernel's EROFS", j.Stderr.Text)
			}
			if _, err := os.Stat(filepath.Join(ws, file)); (err == nil) != tc.inside {
				t.Errorf("file written in cwd exists on the host: %v, want %v", err == nil, tc.inside)
			}

			j = run("echo outside > " + filepath.Join(outside, file))
			if ok(j) != tc.outsideOK {
				t.Errorf("write outside: exit %v, stderr %q; want success %v", deref(j.ExitCode), j.Stderr.Text, tc.outsideOK)
			}
			if _, err := os.Stat(filepath.Join(outside, file)); (err == nil) != tc.outsideOK {
				t.Errorf("file written outside exists on the host: %v, want %v", err == nil, tc.outsideOK)
			}

			j = run("echo '[evil]' >> .git/config")
			if ok(j) != tc.gitOK {
				t.Errorf("append to .git/config: exit %v, stderr %q; want success %v", deref(j.ExitCode), j.Stderr.Text, tc.gitOK)
			}
			if b, _ := os.ReadFile(gitConfig); strings.Contains(string(b), "[evil]") != tc.gitOK {
				t.Errorf(".git/config on the host = %q", b)
			}
			j = run("echo '[evil]' >> vendor/lib/.git/config")
			if ok(j) != tc.gitOK {
				t.Errorf("append to a nested .git/config: exit %v, stderr %q; want success %v", deref(j.ExitCode), j.Stderr.Text, tc.gitOK)
			}
			if b, _ := os.ReadFile(nestedConfig); strings.Contains(string(b), "[evil]") != tc.gitOK {
				t.Errorf("nested .git/config on the host = %q", b)
			}
			if tc.gitOK {
				for _, c := range []string{gitConfig, nestedConfig} {
					if err := os.WriteFile(c, []byte("[core]\n"), 0o644); err != nil {
						t.Fatal(err)
					}
				}
			}

			j = run(`cat "$DSH_HOME/server.token"`)
			if ok(j) != tc.tokenOK || (!tc.tokenOK && strings.Contains(j.Stdout.Text, s.Token)) {
				t.Errorf("cat token: exit %v, stdout %q; want readable %v", deref(j.ExitCode), j.Stdout.Text, tc.tokenOK)
			}

			j = run(fmt.Sprintf("exec 3<>/dev/tcp/127.0.0.1/%d && echo connected", port))
			if got, want := ok(j), tc.network == "on"; got != want {
				t.Errorf("connect to 127.0.0.1:%d: exit %v, stderr %q; want success %v", port, deref(j.ExitCode), j.Stderr.Text, want)
			}
		})
	}
}

// TestSandboxLineage: a child agent, and an execution of an agent, may only
// tighten the agent's policy; what they leave out they inherit.
func TestSandboxLineage(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	needSandbox(t, s)
	ws := t.TempDir()

	var parent sandboxAgent
	if st := s.DoJSON(t, "POST", "/agents", map[string]any{"cwd": ws, "sandbox": map[string]string{"policy": "workspace-write", "network": "off"}}, &parent); st != 201 {
		t.Fatalf("POST /agents = %d", st)
	}
	if parent.Sandbox == nil || *parent.Sandbox != (sandboxPolicy{"workspace-write", "off"}) {
		t.Fatalf("parent sandbox = %+v", parent.Sandbox)
	}
	for _, tc := range []struct {
		path string
		body map[string]any
	}{
		{"/agents/" + parent.ID + "/spawn", map[string]any{"sandbox": map[string]string{"policy": "unrestricted"}}},
		{"/agents/" + parent.ID + "/fork", map[string]any{"sandbox": map[string]string{"network": "on"}}},
		{"/exec", map[string]any{"command": "true", "agentId": parent.ID, "sandbox": map[string]string{"network": "on"}}},
	} {
		var p problemCode
		if st := s.DoJSON(t, "POST", tc.path, tc.body, &p); st != 422 || p.Code != "sandbox_looser" {
			t.Errorf("POST %s %v = %d %+v, want 422 sandbox_looser", tc.path, tc.body, st, p)
		}
	}
	var child sandboxAgent
	if st := s.DoJSON(t, "POST", "/agents/"+parent.ID+"/spawn", nil, &child); st != 201 {
		t.Fatalf("spawn = %d", st)
	}
	if child.Sandbox == nil || *child.Sandbox != *parent.Sandbox {
		t.Errorf("spawned child sandbox = %+v, want the parent's", child.Sandbox)
	}
	var tighter sandboxAgent
	if st := s.DoJSON(t, "POST", "/agents/"+child.ID+"/fork", map[string]any{"sandbox": map[string]string{"policy": "read-only"}}, &tighter); st != 201 {
		t.Fatalf("fork tighter = %d", st)
	}
	if tighter.Sandbox == nil || *tighter.Sandbox != (sandboxPolicy{"read-only", "off"}) {
		t.Errorf("tighter fork sandbox = %+v", tighter.Sandbox)
	}
	j := s.execSandboxed(t, map[string]any{"command": "touch x", "agentId": tighter.ID})
	if j.Sandbox == nil || *j.Sandbox != *tighter.Sandbox || j.ExitCode == nil || *j.ExitCode == 0 {
		t.Errorf("exec as read-only agent: sandbox %+v exit %v stderr %q", j.Sandbox, deref(j.ExitCode), j.Stderr.Text)
	}
}

// TestSandboxModelCannotChoose: a tool argument naming a policy is ignored
// and recorded as ignored; the agent's policy applies and the transcript's
// tool/result says which.
func TestSandboxModelCannotChoose(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	needSandbox(t, s)
	ws, outside := t.TempDir(), t.TempDir()
	var a sandboxAgent
	if st := s.DoJSON(t, "POST", "/agents", map[string]any{"cwd": ws, "sandbox": map[string]string{"policy": "workspace-write", "network": "off"}}, &a); st != 201 {
		t.Fatalf("POST /agents = %d", st)
	}
	target := filepath.Join(outside, "escaped")
	r := s.callTool(t, a.ID, "bash", map[string]any{
		"command": "echo x > " + target,
		"sandbox": map[string]string{"policy": "unrestricted", "network": "on"},
		"policy":  "unrestricted",
	})
	// The other temporary directory is not even visible: /tmp is private.
	if !strings.Contains(r.Text, "No such file or directory") || !strings.Contains(r.Text, "[exit code: 1]") {
		t.Errorf("bash result %q, want the write refused", r.Text)
	}
	if _, err := os.Stat(target); err == nil {
		t.Errorf("the model's command wrote %s", target)
	}
	var tr struct {
		Events []struct {
			Type string          `json:"type"`
			Data json.RawMessage `json:"data"`
		} `json:"events"`
	}
	resp := s.DoWith(t, "GET", "/agents/"+a.ID+"/transcript", nil, map[string]string{"Accept": "application/json", "Authorization": "Bearer " + s.Token})
	decode(t, resp, &tr)
	var ignored []string
	var applied *sandboxPolicy
	for _, e := range tr.Events {
		switch e.Type {
		case "tool/call":
			var d struct{ Ignored []string }
			_ = json.Unmarshal(e.Data, &d)
			ignored = d.Ignored
		case "tool/result":
			var d struct{ Sandbox *sandboxPolicy }
			_ = json.Unmarshal(e.Data, &d)
			applied = d.Sandbox
		}
	}
	if !slices.Contains(ignored, "sandbox") || !slices.Contains(ignored, "policy") {
		t.Errorf("tool/call ignored = %v, want sandbox and policy", ignored)
	}
	if applied == nil || *applied != (sandboxPolicy{"workspace-write", "off"}) {
		t.Errorf("tool/result sandbox = %+v", applied)
	}
}

// TestSandboxFacts: under workspace-write with the network off a model's
// command still sees its managed facts, and the bash tool says the policy.
func TestSandboxFacts(t *testing.T) {
	t.Parallel()
	s := startServer(t, withConfig("sandbox:\n  policy: workspace-write\n  network: \"off\"\n"))
	needSandbox(t, s)
	var a sandboxAgent
	if st := s.DoJSON(t, "POST", "/agents", map[string]any{}, &a); st != 201 {
		t.Fatalf("POST /agents = %d", st)
	}
	if a.Sandbox == nil || *a.Sandbox != (sandboxPolicy{"workspace-write", "off"}) {
		t.Fatalf("agent sandbox = %+v, want the configured default", a.Sandbox)
	}
	f := facts(t, s, a.ID, scriptedModel(t, s))
	if f["home"] != s.Home || f["shell"] != "1" || f["session"] != a.ID || f["stale"] != "unset" {
		t.Errorf("facts under workspace-write/off = %v", f)
	}
	var defs []struct {
		Name        string `json:"name"`
		Description string `json:"description"`
	}
	if st := s.DoJSON(t, "GET", "/tools", nil, &defs); st != 200 {
		t.Fatalf("GET /tools = %d", st)
	}
	for _, d := range defs {
		if d.Name == "bash" && !strings.Contains(d.Description, "Sandbox workspace-write: write only in workdir") {
			t.Errorf("bash description does not state the policy: %q", d.Description)
		}
	}
}

// TestSandboxUnavailable: where bubblewrap cannot run, confined policies
// are refused with sandbox_unavailable, never run unconfined, and /healthz
// says only unrestricted is enforceable.
func TestSandboxUnavailable(t *testing.T) {
	t.Parallel()
	missing := filepath.Join(t.TempDir(), "no-bwrap")
	s := startServer(t, withConfig("sandbox:\n  mechanism: bubblewrap\n  bwrap: "+missing+"\n"))
	var h healthSandbox
	if st := s.DoJSON(t, "GET", "/healthz", nil, &h); st != 200 || h.Details.Sandbox == nil {
		t.Fatalf("GET /healthz = %d", st)
	}
	sb := h.Details.Sandbox
	if !slices.Equal(sb.Policies, []string{"unrestricted"}) || !slices.Equal(sb.Networks, []string{"on"}) || !strings.Contains(sb.Reason, "no-bwrap") {
		t.Errorf("healthz sandbox = %+v", sb)
	}
	out := filepath.Join(t.TempDir(), "ran")
	for _, tc := range []struct {
		path string
		body map[string]any
	}{
		{"/exec", map[string]any{"command": "touch " + out, "sandbox": map[string]string{"policy": "read-only"}}},
		{"/exec", map[string]any{"command": "touch " + out, "sandbox": map[string]string{"network": "off"}}},
		{"/agents", map[string]any{"sandbox": map[string]string{"policy": "workspace-write"}}},
	} {
		var p problemCode
		if st := s.DoJSON(t, "POST", tc.path, tc.body, &p); st != 422 || p.Code != "sandbox_unavailable" {
			t.Errorf("POST %s %v = %d %+v, want 422 sandbox_unavailable", tc.path, tc.body, st, p)
		}
	}
	if _, err := os.Stat(out); err == nil {
		t.Error("a refused command ran")
	}
	j := s.execSandboxed(t, map[string]any{"command": "true"})
	if j.Sandbox == nil || *j.Sandbox != (sandboxPolicy{"unrestricted", "on"}) || deref(j.ExitCode) != 0 {
		t.Errorf("unrestricted exec: %+v", j)
	}
	refuseToStart(t, filepath.Join(t.TempDir(), "home"), "--config", writeConfig(t, "sandbox:\n  policy: read-only\n  mechanism: bubblewrap\n  bwrap: "+missing+"\n"))
}

func writeConfig(t *testing.T, yaml string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(p, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestSandboxCannotBeUndone: a confined command cannot take its sandbox
// apart. dshd often runs as root, and root inside a mount namespace may
// remount and unmount unless its capabilities are gone: then `/` could be
// made writable again and the tmpfs hiding the dshd home lifted.
func TestSandboxCannotBeUndone(t *testing.T) {
	t.Parallel()
	for _, mech := range sandboxMechanisms {
		t.Run(mech, func(t *testing.T) { testSandboxCannotBeUndone(t, mech) })
	}
}

func testSandboxCannotBeUndone(t *testing.T, mech string) {
	s := startSandboxServer(t, mech)
	ws, outside := t.TempDir(), t.TempDir()
	escaped := filepath.Join(outside, "escaped")
	for _, pol := range []map[string]string{
		{"policy": "workspace-write", "network": "off"},
		{"policy": "read-only", "network": "on"},
		{"policy": "unrestricted", "network": "off"},
	} {
		j := s.execSandboxed(t, map[string]any{"cwd": ws, "sandbox": pol, "command": `
mount -o remount,rw / 2>/dev/null
for m in "$DSH_HOME" /tmp "$(dirname "$DSH_HOME")"; do umount -l "$m" 2>/dev/null; done
mkdir -p ` + outside + ` 2>/dev/null
echo x > ` + escaped + ` 2>/dev/null
cat "$DSH_HOME/server.token" 2>/dev/null
grep ^CapEff /proc/self/status`})
		if strings.Contains(j.Stdout.Text, s.Token) {
			t.Errorf("%v: the command read the token after unmounting: %q", pol, j.Stdout.Text)
		}
		if pol["policy"] != "unrestricted" {
			if _, err := os.Stat(escaped); err == nil {
				t.Errorf("%v: the command wrote %s after remounting /", pol, escaped)
				os.Remove(escaped)
			}
		}
		if !strings.Contains(j.Stdout.Text, "CapEff:\t0000000000000000") {
			t.Errorf("%v: effective capabilities inside the sandbox: %q", pol, j.Stdout.Text)
		}
	}
}

// TestAgentFullLoopSandboxed drives the agent loop under workspace-write
// with the network off, the server's default: the model's bash tool
// writes in its workspace but nowhere else, cannot connect even to
// loopback, cannot touch .git, runs a background job, and sees its DSH_*
// facts on the first turn, after a restart and resume, and in a fork and
// a spawn (which inherit the policy); hooks run outside the sandbox (they
// write a log the sandbox cannot see); the transcript records every step
// with the policy that applied.
func TestAgentFullLoopSandboxed(t *testing.T) {
	t.Parallel()
	home := filepath.Join(t.TempDir(), "home")
	ws, outside := t.TempDir(), t.TempDir()
	if err := os.MkdirAll(filepath.Join(ws, ".git"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ws, ".git", "config"), []byte("[core]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	hookLog := filepath.Join(outside, "hooks.log")
	apitest.WriteJSON(t, filepath.Join(home, "hooks", "claude-code.json"), map[string]any{"hooks": map[string]any{
		"PreToolUse":  []any{map[string]any{"matcher": "Bash", "hooks": []any{map[string]any{"type": "command", "command": "echo pre >> " + hookLog}}}},
		"PostToolUse": []any{map[string]any{"matcher": "Bash", "hooks": []any{map[string]any{"type": "command", "command": "echo post >> " + hookLog}}}},
	}})
	config := withConfig("sandbox:\n  policy: workspace-write\n  network: \"off\"\n")
	s := startServer(t, withHome(home), withEnv("DSH_STALE=stale"), config)
	needSandbox(t, s)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()

	var root sandboxAgent
	if st := s.DoJSON(t, "POST", "/agents", map[string]any{"cwd": ws}, &root); st != 201 {
		t.Fatalf("create agent = %d", st)
	}
	want := sandboxPolicy{"workspace-write", "off"}
	if root.Sandbox == nil || *root.Sandbox != want {
		t.Fatalf("agent sandbox = %+v, want the configured default", root.Sandbox)
	}
	command := scriptedModel(t, s)
	checkFacts := func(name, id string) {
		t.Helper()
		f := facts(t, s, id, command)
		if f["home"] != home || f["shell"] != "1" || f["session"] != id || f["stale"] != "unset" {
			t.Errorf("%s: facts %v", name, f)
		}
	}
	checkFacts("first turn", root.ID)

	steps := []struct {
		name, command string
		ok            bool
		stderr        string
	}{
		{"write in the workspace", "echo draft > notes.txt && cat notes.txt", true, ""},
		{"write outside", "echo x > " + filepath.Join(outside, "escaped"), false, "No such file or directory"},
		{"write in the home's parent", "echo x > " + filepath.Join(filepath.Dir(home), "escaped"), false, "No such file or directory"},
		{"write /etc", "echo x > /etc/dshd-escaped", false, "Read-only file system"},
		{"modify .git", "echo '[evil]' >> .git/config", false, "Read-only file system"},
		{"connect to loopback", fmt.Sprintf("exec 3<>/dev/tcp/127.0.0.1/%d", ln.Addr().(*net.TCPAddr).Port), false, "Connection refused"},
		{"read the token", `cat "$DSH_HOME/server.token"`, false, "No such file or directory"},
	}
	for _, st := range steps {
		r := s.callTool(t, root.ID, "bash", map[string]any{"command": st.command})
		if r.IsError || (deref(r.ExitCode) == 0) != st.ok || !strings.Contains(r.Text, st.stderr) {
			t.Errorf("%s: result %+v, want success %v and %q", st.name, r, st.ok, st.stderr)
		}
	}
	if b, err := os.ReadFile(filepath.Join(ws, "notes.txt")); err != nil || string(b) != "draft\n" {
		t.Errorf("workspace file on the host = %q, %v", b, err)
	}
	for _, p := range []string{filepath.Join(outside, "escaped"), filepath.Join(filepath.Dir(home), "escaped"), "/etc/dshd-escaped"} {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("the sandboxed model wrote %s", p)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(ws, ".git", "config")); string(b) != "[core]\n" {
		t.Errorf(".git/config on the host = %q", b)
	}

	// A background job, under the same policy.
	r := s.callTool(t, root.ID, "bash", map[string]any{"command": "echo bg > bg.txt; echo x > /etc/dshd-bg || echo refused", "run_in_background": true})
	if r.JobID == "" {
		t.Fatalf("background call gave no job: %+v", r)
	}
	var bg sandboxJob
	s.DoJSON(t, "GET", "/jobs/"+r.JobID+"?waitMs=10000", nil, &bg)
	if bg.Sandbox == nil || *bg.Sandbox != want || !strings.Contains(bg.Stdout.Text, "refused") {
		t.Errorf("background job = %+v", bg)
	}
	if _, err := os.Stat(filepath.Join(ws, "bg.txt")); err != nil {
		t.Errorf("background write in the workspace: %v", err)
	}

	// Restart on the same home: the agent keeps its policy.
	s.stop(t)
	s = startServer(t, withHome(home), withEnv("DSH_STALE=stale-again"), config)
	var resumed sandboxAgent
	if st := s.DoJSON(t, "POST", "/agents/"+root.ID+"/resume", nil, &resumed); st != 200 || resumed.Sandbox == nil || *resumed.Sandbox != want {
		t.Fatalf("resume = %d %+v", st, resumed)
	}
	checkFacts("after resume", root.ID)
	var fork, child sandboxAgent
	if st := s.DoJSON(t, "POST", "/agents/"+root.ID+"/fork", map[string]any{}, &fork); st != 201 || fork.Sandbox == nil || *fork.Sandbox != want {
		t.Fatalf("fork = %d %+v", st, fork)
	}
	if st := s.DoJSON(t, "POST", "/agents/"+root.ID+"/spawn", map[string]any{}, &child); st != 201 || child.Sandbox == nil || *child.Sandbox != want {
		t.Fatalf("spawn = %d %+v", st, child)
	}
	checkFacts("fork", fork.ID)
	checkFacts("spawn", child.ID)

	// Hooks ran outside the sandbox, once before and once after each call
	// of the root agent's first server (1 facts + 7 steps + 1 background)
	// and of the second (1 facts).
	b, err := os.ReadFile(hookLog)
	if err != nil {
		t.Fatalf("hooks wrote no log outside the sandbox: %v", err)
	}
	if pre, post := strings.Count(string(b), "pre\n"), strings.Count(string(b), "post\n"); pre < 10 || post < 10 {
		t.Errorf("hook log has %d pre and %d post lines, want at least 10 each", pre, post)
	}

	// The transcript records every call, its result, and the policy.
	var tr struct {
		Events []struct {
			Type string          `json:"type"`
			Data json.RawMessage `json:"data"`
		} `json:"events"`
	}
	resp := s.DoWith(t, "GET", "/agents/"+root.ID+"/transcript", nil, map[string]string{"Accept": "application/json", "Authorization": "Bearer " + s.Token})
	decode(t, resp, &tr)
	counts := map[string]int{}
	for _, e := range tr.Events {
		counts[e.Type]++
		if e.Type == "tool/result" {
			var d struct{ Sandbox *sandboxPolicy }
			_ = json.Unmarshal(e.Data, &d)
			if d.Sandbox == nil || *d.Sandbox != want {
				t.Errorf("tool/result sandbox = %+v, want %v", d.Sandbox, want)
			}
		}
	}
	if counts["tool/call"] != 10 || counts["tool/result"] != 10 || counts["session/resume"] != 1 || counts["hook/result"] < 20 {
		t.Errorf("transcript event counts = %v, want 10 calls and results, a resume, 20 hook results", counts)
	}
}
