package tests

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/dshd/dshd/internal/apitest"
	"github.com/dshd/dshd/internal/testenv"
)

// fdProbe lists the descriptors of the shell that runs it (its own, not
// those ls opens) and tries to write through descriptor 3.
const fdProbe = `ls -l /proc/$$/fd; if { echo LEAKED >&3; } 2>/dev/null; then echo FD3-WRITABLE; fi`

var fdLine = regexp.MustCompile(`(?m)^l\S+ .* (\d+) -> (.*)$`)

// openFDs parses fdProbe's listing into descriptor -> target.
func openFDs(t *testing.T, listing string) map[int]string {
	t.Helper()
	fds := map[int]string{}
	for _, m := range fdLine.FindAllStringSubmatch(listing, -1) {
		n, _ := strconv.Atoi(m[1])
		fds[n] = m[2]
	}
	if len(fds) == 0 {
		t.Fatalf("no descriptors in the listing:\n%s", listing)
	}
	return fds
}

// checkOnlyStdio fails unless what fdProbe printed shows descriptors 0-2
// only and no write through descriptor 3.
func checkOnlyStdio(t *testing.T, who, out string) {
	t.Helper()
	fds := openFDs(t, out)
	var extra []string
	for fd, target := range fds {
		if fd > 2 {
			extra = append(extra, strconv.Itoa(fd)+" -> "+target)
		}
	}
	slices.Sort(extra)
	if len(extra) > 0 {
		t.Errorf("%s has descriptors beyond 0-2: %v\n%s", who, extra, out)
	}
	if strings.Contains(out, "FD3-WRITABLE") {
		t.Errorf("%s wrote through descriptor 3:\n%s", who, out)
	}
}

// TestInheritedDescriptors starts the real server with a descriptor open
// without close-on-exec (as `dshd 3>>harness.log` would) and checks that
// no job, unrestricted or sandboxed under either mechanism, and no hook
// process has it, nor any descriptor beyond 0-2. The baseline: a child the
// test starts itself with the same descriptor has it and writes through it.
func TestInheritedDescriptors(t *testing.T) {
	for _, mech := range sandboxMechanisms {
		t.Run(mech, func(t *testing.T) { testInheritedDescriptors(t, mech) })
	}
}

func testInheritedDescriptors(t *testing.T, mech string) {
	testenv.SkipMechanism(t, mech)
	harnessLog := filepath.Join(t.TempDir(), "harness.log")
	f, err := os.OpenFile(harnessLog, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()

	// Baseline: a process that inherits the descriptor can write through it.
	base := exec.Command("bash", "-c", fdProbe)
	base.ExtraFiles = []*os.File{f}
	out, err := base.Output()
	if err != nil {
		t.Fatal(err)
	}
	if fds := openFDs(t, string(out)); fds[3] != harnessLog || !strings.Contains(string(out), "FD3-WRITABLE") {
		t.Fatalf("baseline child does not show the inherited descriptor 3 -> %s:\n%s", harnessLog, out)
	}

	home := filepath.Join(t.TempDir(), "home")
	hookOut := filepath.Join(t.TempDir(), "hook.out")
	apitest.WriteJSON(t, filepath.Join(home, "hooks", "claude-code.json"), map[string]any{"hooks": map[string]any{
		"PreToolUse": []any{map[string]any{"matcher": "Bash", "hooks": []any{map[string]any{"type": "command",
			"command": "exec >" + hookOut + " 2>&1; " + fdProbe}}}},
	}})
	s := startServer(t, withHome(home), withExtraFiles(f), withConfig("sandbox:\n  mechanism: "+mech+"\n"))
	needSandbox(t, s)

	ws := t.TempDir()
	for _, policy := range []string{"unrestricted", "workspace-write", "read-only"} {
		for _, network := range []string{"on", "off"} {
			j := s.execSandboxed(t, map[string]any{"command": fdProbe, "cwd": ws,
				"sandbox": map[string]string{"policy": policy, "network": network}})
			if j.State != "exited" || j.ExitCode == nil || *j.ExitCode != 0 {
				t.Errorf("%s/%s job = %+v", policy, network, j)
				continue
			}
			checkOnlyStdio(t, "a "+policy+"/"+network+" job", j.Stdout.Text)
		}
	}

	var a agent
	if st := s.DoJSON(t, "POST", "/agents", map[string]any{"cwd": ws}, &a); st != 201 {
		t.Fatalf("create agent = %d", st)
	}
	if r := s.callTool(t, a.ID, "bash", map[string]any{"command": "echo called"}); r.IsError || strings.TrimSpace(r.Text) != "called" {
		t.Fatalf("tool call = %+v", r)
	}
	hook, err := os.ReadFile(hookOut)
	if err != nil {
		t.Fatalf("the PreToolUse hook did not run: %v", err)
	}
	checkOnlyStdio(t, "a hook process", string(hook))

	if b, _ := os.ReadFile(harnessLog); strings.Count(string(b), "LEAKED") != 1 {
		t.Errorf("harness.log = %q, want the baseline's one line", b)
	}
}
