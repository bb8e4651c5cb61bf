package mcp

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/dshd/dshd/internal/agents"
	"github.com/dshd/dshd/internal/exec"
	"github.com/dshd/dshd/internal/run"
	"github.com/dshd/dshd/internal/sandbox"
	"github.com/dshd/dshd/internal/testenv"
)

// TestDeclaredSandboxTightens: the sandbox mode a client declares in a
// call's _meta (Codex's codex/sandbox-state-meta) confines that call's
// command, and never loosens the agent's policy.
func TestDeclaredSandboxTightens(t *testing.T) {
	host := sandbox.NewHost(context.Background(), sandbox.Config{})
	if err := host.Check(sandbox.Policy{FS: sandbox.ReadOnly, Network: sandbox.NetworkOff}); err != nil {
		testenv.Need(t, "this host cannot enforce read-only without network: %v", err)
	}
	w := newWorld(t, Options{}, func(eo *exec.Options, ro *run.Options) {
		eo.Sandbox = host
		ro.SandboxHost = host
	})
	ctx := context.Background()
	open := func(b agents.Bounds) (*sdk.ClientSession, string) {
		dir := t.TempDir()
		a, err := w.svc.CreateAgent(ctx, dir, b)
		if err != nil {
			t.Fatal(err)
		}
		cs, _ := w.connect(t, "", "", map[string]string{AgentHeader: a.ID}, nil)
		return cs, dir
	}
	call := func(cs *sdk.ClientSession, command string, meta map[string]any) string {
		t.Helper()
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		p := &sdk.CallToolParams{Name: "bash", Arguments: map[string]any{"command": command}}
		if meta != nil {
			p.Meta = sdk.Meta{CodexSandboxMeta: meta}
		}
		res, err := cs.CallTool(cctx, p)
		if err != nil {
			t.Fatal(err)
		}
		return text(t, res)
	}
	codex := func(policy map[string]any) map[string]any {
		return map[string]any{"sandboxPolicy": policy, "sandboxCwd": "/somewhere", "useLegacyLandlock": false}
	}

	cs, dir := open(agents.Bounds{}) // the server's default: unrestricted, network on
	if caps := cs.InitializeResult().Capabilities; caps == nil || caps.Experimental[CodexSandboxMeta] == nil {
		t.Errorf("capabilities %+v do not declare %s: Codex sends its sandbox state only then", caps, CodexSandboxMeta)
	}
	touch := func(name string) string { return "touch " + name + " && echo wrote || echo refused" }
	if out := call(cs, touch("ro"), codex(map[string]any{"type": "read-only"})); !strings.Contains(out, "refused") {
		t.Errorf("read-only declared: %q, want the write refused", out)
	}
	if _, err := os.Stat(filepath.Join(dir, "ro")); err == nil {
		t.Error("a read-only call wrote into the agent's directory")
	}
	if out := call(cs, touch("ww")+"; tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '", codex(map[string]any{"type": "workspace-write", "network_access": false})); !strings.Contains(out, "wrote") || strings.TrimSpace(strings.SplitN(out, "\n", 2)[1]) != "lo" {
		t.Errorf("workspace-write without network declared: %q, want the workspace written and only lo", out)
	}
	if out := call(cs, touch("/tmp/../"+filepath.Base(dir)+"-outside"), codex(map[string]any{"type": "workspace-write", "network_access": true})); !strings.Contains(out, "refused") {
		t.Errorf("workspace-write declared, a write outside the workspace: %q, want it refused", out)
	}
	if out := call(cs, touch("pp"), map[string]any{"permissionProfile": map[string]any{"type": "managed", "network": "restricted",
		"file_system": map[string]any{"type": "restricted", "entries": []any{map[string]any{"access": "read", "path": map[string]any{"type": "special"}}}}}}); !strings.Contains(out, "refused") {
		t.Errorf("a read-only permission profile declared: %q, want the write refused", out)
	}
	// Without a declaration the agent's own policy applies: the write succeeds.
	if out := call(cs, touch("free"), nil); !strings.Contains(out, "wrote") {
		t.Errorf("no declaration: %q, want the write done", out)
	}
	if out := call(cs, touch("full"), codex(map[string]any{"type": "danger-full-access"})); !strings.Contains(out, "wrote") {
		t.Errorf("danger-full-access declared on an unrestricted agent: %q, want the write done", out)
	}

	// A read-only agent stays read-only whatever its client declares.
	cs, dir = open(agents.Bounds{Sandbox: sandbox.Policy{FS: sandbox.ReadOnly}})
	for _, decl := range []map[string]any{codex(map[string]any{"type": "danger-full-access"}), codex(map[string]any{"type": "workspace-write", "network_access": true}), {"permissionProfile": map[string]any{"type": "disabled"}}} {
		if out := call(cs, touch("loose"), decl); !strings.Contains(out, "refused") {
			t.Errorf("read-only agent, %v declared: %q, want the write refused", decl, out)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "loose")); err == nil {
		t.Error("a declaration loosened a read-only agent")
	}
}

func TestTighter(t *testing.T) {
	ro := sandbox.Policy{FS: sandbox.ReadOnly, Network: sandbox.NetworkOn}
	allow := sandbox.Policy{FS: sandbox.WorkspaceWrite, Network: sandbox.NetworkAllowlist, Allow: sandbox.MustHosts("a.example.com")}
	for _, c := range []struct{ a, b, want sandbox.Policy }{
		{sandbox.Default, ro, ro},
		{ro, sandbox.Default, ro},
		{ro, sandbox.Policy{FS: sandbox.WorkspaceWrite, Network: sandbox.NetworkOff}, sandbox.Policy{FS: sandbox.ReadOnly, Network: sandbox.NetworkOff}},
		{sandbox.Default, sandbox.Policy{Network: sandbox.NetworkOff}, sandbox.Policy{FS: sandbox.Unrestricted, Network: sandbox.NetworkOff}},
		// An allowlist stays unless a declaration turns the network off.
		{allow, sandbox.Policy{FS: sandbox.ReadOnly, Network: sandbox.NetworkOn}, sandbox.Policy{FS: sandbox.ReadOnly, Network: sandbox.NetworkAllowlist, Allow: allow.Allow}},
		{allow, sandbox.Policy{Network: sandbox.NetworkOff}, sandbox.Policy{FS: sandbox.WorkspaceWrite, Network: sandbox.NetworkOff}},
	} {
		if got := tighter(c.a, c.b); got != c.want {
			t.Errorf("tighter(%v, %v) = %v, want %v", c.a, c.b, got, c.want)
		}
	}
}
