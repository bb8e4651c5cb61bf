package sandbox

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	osexec "os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"

	"github.com/dshd/dshd/internal/testenv"
)

func TestPolicyRules(t *testing.T) {
	ww := func(n Network) Policy { return Policy{FS: WorkspaceWrite, Network: n} }
	for _, tc := range []struct {
		name         string
		p, outer     Policy
		within       bool
		invalid      bool
		confined     bool
		filled       Policy // p.Or(outer)
		fillFromDflt Policy // p.Or(Default)
	}{
		{name: "same", p: ww(NetworkOff), outer: ww(NetworkOff), within: true, confined: true, filled: ww(NetworkOff), fillFromDflt: ww(NetworkOff)},
		{name: "tighter fs", p: Policy{FS: ReadOnly, Network: NetworkOff}, outer: ww(NetworkOff), within: true, confined: true, filled: Policy{FS: ReadOnly, Network: NetworkOff}, fillFromDflt: Policy{FS: ReadOnly, Network: NetworkOff}},
		{name: "tighter network", p: Policy{FS: Unrestricted, Network: NetworkOff}, outer: Default, within: true, confined: true, filled: Policy{FS: Unrestricted, Network: NetworkOff}, fillFromDflt: Policy{FS: Unrestricted, Network: NetworkOff}},
		{name: "looser fs", p: Policy{FS: Unrestricted, Network: NetworkOff}, outer: ww(NetworkOff), confined: true, filled: Policy{FS: Unrestricted, Network: NetworkOff}, fillFromDflt: Policy{FS: Unrestricted, Network: NetworkOff}},
		{name: "looser network", p: ww(NetworkOn), outer: ww(NetworkOff), confined: true, filled: ww(NetworkOn), fillFromDflt: ww(NetworkOn)},
		{name: "looser network, tighter fs", p: Policy{FS: ReadOnly, Network: NetworkOn}, outer: ww(NetworkOff), confined: true, filled: Policy{FS: ReadOnly, Network: NetworkOn}, fillFromDflt: Policy{FS: ReadOnly, Network: NetworkOn}},
		{name: "unrestricted", p: Default, outer: Default, within: true, filled: Default, fillFromDflt: Default},
		{name: "empty takes the outer", p: Policy{}, outer: ww(NetworkOff), within: true, confined: true, filled: ww(NetworkOff), fillFromDflt: Default},
		{name: "network only", p: Policy{Network: NetworkOff}, outer: Policy{FS: ReadOnly, Network: NetworkOn}, within: true, confined: true, filled: Policy{FS: ReadOnly, Network: NetworkOff}, fillFromDflt: Policy{FS: Unrestricted, Network: NetworkOff}},
		{name: "unknown fs", p: Policy{FS: "everything"}, outer: Default, invalid: true, confined: true, filled: Policy{FS: "everything", Network: NetworkOn}, fillFromDflt: Policy{FS: "everything", Network: NetworkOn}},
		{name: "unknown network", p: Policy{Network: "maybe"}, outer: Default, invalid: true, filled: Policy{FS: Unrestricted, Network: "maybe"}, fillFromDflt: Policy{FS: Unrestricted, Network: "maybe"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.p.Validate(); (err != nil) != tc.invalid || (err != nil && !errors.Is(err, ErrInvalid)) {
				t.Errorf("Validate() = %v, want invalid %v", err, tc.invalid)
			}
			if got := tc.p.Or(tc.outer); got != tc.filled {
				t.Errorf("Or(outer) = %v, want %v", got, tc.filled)
			}
			if got := tc.p.Or(Default); got != tc.fillFromDflt {
				t.Errorf("Or(Default) = %v, want %v", got, tc.fillFromDflt)
			}
			if tc.invalid {
				return
			}
			full := tc.p.Or(tc.outer)
			if got := full.Within(tc.outer); got != tc.within {
				t.Errorf("Within = %v, want %v", got, tc.within)
			}
			err := full.CheckWithin(tc.outer, "agent agt_x")
			if (err == nil) != tc.within || (err != nil && (!errors.Is(err, ErrLooser) || !strings.Contains(err.Error(), "agent agt_x"))) {
				t.Errorf("CheckWithin = %v, want looser %v naming the agent", err, !tc.within)
			}
			if got := full.Confined(); got != tc.confined {
				t.Errorf("Confined = %v, want %v", got, tc.confined)
			}
		})
	}
}

func TestSentence(t *testing.T) {
	for _, p := range []Policy{Default, {FS: Unrestricted, Network: NetworkOff}, {FS: WorkspaceWrite, Network: NetworkOn}, {FS: WorkspaceWrite, Network: NetworkOff}, {FS: ReadOnly, Network: NetworkOn}, {FS: ReadOnly, Network: NetworkOff}} {
		s := p.Sentence()
		if !strings.HasPrefix(s, "Sandbox") || !strings.HasSuffix(s, "; network "+string(p.Network)+".") || strings.Contains(strings.TrimSuffix(s, "."), "\n") {
			t.Errorf("%v: sentence %q", p, s)
		}
		if p.FS != Unrestricted && !strings.Contains(s, string(p.FS)) {
			t.Errorf("%v: sentence %q does not name the policy", p, s)
		}
	}
}

// layout makes a workspace with a repository, a nested one two levels
// down, a worktree's .git file, a nested one inside node_modules, a home with skills and a token, and a token file outside.
type layout struct {
	ws, outside, home, skills, homeToken, token string
}

func newLayout(t testing.TB) layout {
	t.Helper()
	root := t.TempDir()
	l := layout{
		ws:      filepath.Join(root, "ws"),
		outside: filepath.Join(root, "outside"),
		home:    filepath.Join(root, "home"),
	}
	l.skills = filepath.Join(l.home, "skills")
	l.homeToken = filepath.Join(l.home, "server.token")
	l.token = filepath.Join(root, "token")
	for _, d := range []string{
		filepath.Join(l.ws, ".git"), filepath.Join(l.ws, "a", "b", ".git"), filepath.Join(l.ws, "node_modules", "x", ".git"),
		filepath.Join(l.ws, "wt"), l.outside, l.skills,
	} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for p, body := range map[string]string{
		filepath.Join(l.ws, ".git", "config"):           "[core]\n",
		filepath.Join(l.ws, "a", "b", ".git", "config"): "[core]\n",
		filepath.Join(l.ws, "wt", ".git"):               "gitdir: /elsewhere\n",
		filepath.Join(l.skills, "SKILL.md"):             "skill\n",
		l.homeToken:                                     "secret-in-home\n",
		l.token:                                         "secret-outside\n",
		filepath.Join(l.ws, "node_modules", "x", ".git", "config"): "[core]\n",
	} {
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return l
}

func TestPlanFor(t *testing.T) {
	l := newLayout(t)
	extra := t.TempDir()
	protected := filepath.Join(l.ws, "secrets.env")
	if err := os.WriteFile(protected, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	h := &Host{cfg: Config{Home: l.home, Skills: l.skills, TokenFile: l.token, WritableRoots: []string{extra, "/does/not/exist"}, Protected: []string{protected, "/does/not/exist/either"}}}
	gits := []string{filepath.Join(l.ws, ".git"), filepath.Join(l.ws, "a", "b", ".git"), filepath.Join(l.ws, "node_modules", "x", ".git"), filepath.Join(l.ws, "wt", ".git")}
	for _, tc := range []struct {
		name  string
		p     Policy
		roots []string
		want  plan
	}{
		{"unrestricted, network off", Policy{FS: Unrestricted, Network: NetworkOff}, nil,
			plan{newNet: true, home: l.home, skills: l.skills, token: l.token}},
		{"workspace-write", Policy{FS: WorkspaceWrite, Network: NetworkOn}, []string{l.ws, l.outside, l.ws},
			plan{readOnlyRoot: true, writable: []string{l.ws, l.outside, extra}, protected: append(gits, protected), home: l.home, skills: l.skills, token: l.token}},
		{"workspace-write, network off", Policy{FS: WorkspaceWrite, Network: NetworkOff}, []string{l.ws, "/proc/sys/kernel", "/sys/fs/cgroup", "/dev/shm"},
			plan{readOnlyRoot: true, newNet: true, writable: []string{l.ws, extra}, protected: append(gits, protected), home: l.home, skills: l.skills, token: l.token}},
		{"read-only", Policy{FS: ReadOnly, Network: NetworkOff}, []string{l.ws, l.outside},
			plan{readOnlyRoot: true, newNet: true, visible: []string{l.ws, l.outside}, home: l.home, skills: l.skills, token: l.token}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := h.planFor(tc.p, tc.roots, nil)
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tc.want, got, cmp.AllowUnexported(plan{})); d != "" {
				t.Errorf("plan (-want +got):\n%s", d)
			}
		})
	}
	// Hidden paths: through links, existing ones only, none inside the home.
	hiddenDir := filepath.Join(l.outside, "run")
	if err := os.MkdirAll(hiddenDir, 0o755); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(l.outside, "var-run")
	if err := os.Symlink(hiddenDir, link); err != nil {
		t.Fatal(err)
	}
	h.cfg.Hidden = []string{hiddenDir, link, l.token, "/does/not/exist", l.homeToken}
	if pl, _ := h.planFor(Policy{FS: WorkspaceWrite, Network: NetworkOn}, []string{l.ws}, nil); !slices.Equal(pl.hidden, []string{hiddenDir, l.token}) {
		t.Errorf("hidden = %v, want %v", pl.hidden, []string{hiddenDir, l.token})
	}
	h.cfg.Hidden = nil

	// A token inside the home is hidden with it, not covered on its own.
	h.cfg.TokenFile = l.homeToken
	if pl, _ := h.planFor(Policy{FS: ReadOnly, Network: NetworkOn}, []string{l.ws}, nil); pl.token != "" {
		t.Errorf("token inside the home covered on its own: %q", pl.token)
	}
}

// TestGitDirsEveryDepth: every .git in a writable root is found, at any
// depth and however many entries come before it, and a search that would
// read more entries than allowed fails rather than leave one writable.
func TestGitDirsEveryDepth(t *testing.T) {
	root := t.TempDir()
	deep := filepath.Join(root, "1", "2", "3", "4", "5", "6")
	// 4,100 directories before the nested repository: the old search gave
	// up after 4,096 entries and left sub/.git writable.
	for i := range 4100 {
		if err := os.Mkdir(filepath.Join(root, fmt.Sprintf("zz%04d", i)), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{filepath.Join(root, "1", "2", "3", ".git"), filepath.Join(deep, ".git"), filepath.Join(root, ".git", "modules", "m", ".git"), filepath.Join(root, "zz4099", "sub", ".git", "hooks")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// A link to a repository elsewhere is not followed (its target is not
	// writable through it unless it is in a root itself).
	if err := os.Symlink(filepath.Join(root, "1"), filepath.Join(root, "link")); err != nil {
		t.Fatal(err)
	}
	var g gitScanner
	budget := DefaultGitScanMaxEntries
	got, err := g.scan(root, &budget, DefaultGitScanMaxEntries)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{filepath.Join(root, ".git"), filepath.Join(root, "1", "2", "3", ".git"), filepath.Join(deep, ".git"), filepath.Join(root, "zz4099", "sub", ".git")}
	if !slices.Equal(got, want) {
		t.Errorf("gitDirs = %v, want %v (every depth, not inside .git, not through links)", got, want)
	}
	used := DefaultGitScanMaxEntries - budget

	limit := used - 1
	budget = limit
	if _, err := g.scan(root, &budget, limit); !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), fmt.Sprint(limit)) {
		t.Errorf("gitDirs over its budget = %v, want ErrUnavailable naming the limit", err)
	}
	h := &Host{cfg: Config{GitScanMaxEntries: limit}, mech: MechanismBubblewrap}
	called := false
	_, err = h.Start(Policy{FS: WorkspaceWrite, Network: NetworkOff}, root, []string{root}, "/bin/true", []string{"true"}, func(string, []string, []*os.File) error { called = true; return nil })
	if !errors.Is(err, ErrUnavailable) || called {
		t.Errorf("Start with a root too large to protect = %v, started %v; want ErrUnavailable and nothing started", err, called)
	}
}

func TestBwrapArgs(t *testing.T) {
	l := newLayout(t)
	h := &Host{cfg: Config{Home: l.home, Skills: l.skills, TokenFile: l.token}}
	g := filepath.Join(l.ws, ".git")
	ng := filepath.Join(l.ws, "a", "b", ".git")
	mg := filepath.Join(l.ws, "node_modules", "x", ".git")
	wg := filepath.Join(l.ws, "wt", ".git")
	tail := []string{"--tmpfs", l.home, "--ro-bind", l.skills, l.skills, "--remount-ro", l.home, "--ro-bind", os.DevNull, l.token, "--chdir", l.ws, "--", "/bin/bash", "-c", "true"}
	for _, tc := range []struct {
		p    Policy
		want []string
	}{
		{Policy{FS: Unrestricted, Network: NetworkOff}, append([]string{"/usr/bin/bwrap", "--cap-drop", "ALL", "--unshare-pid", "--unshare-net",
			"--bind", "/", "/", "--dev-bind", "/dev", "/dev", "--proc", "/proc"}, tail...)},
		{Policy{FS: WorkspaceWrite, Network: NetworkOn}, append([]string{"/usr/bin/bwrap", "--cap-drop", "ALL", "--unshare-pid",
			"--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--remount-ro", "/proc", "--tmpfs", "/tmp",
			"--bind", l.ws, l.ws, "--ro-bind", g, g, "--ro-bind", ng, ng, "--ro-bind", mg, mg, "--ro-bind", wg, wg}, tail...)},
		{Policy{FS: ReadOnly, Network: NetworkOff}, append([]string{"/usr/bin/bwrap", "--cap-drop", "ALL", "--unshare-pid", "--unshare-net",
			"--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--remount-ro", "/proc", "--tmpfs", "/tmp", "--ro-bind", l.ws, l.ws}, tail...)},
		// The allowlist's namespace is dshd's (it listens in it first).
		{Policy{FS: ReadOnly, Network: NetworkAllowlist, Allow: MustHosts("a.example.com")}, append([]string{"/usr/bin/bwrap", "--cap-drop", "ALL", "--unshare-pid",
			"--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--remount-ro", "/proc", "--tmpfs", "/tmp", "--ro-bind", l.ws, l.ws}, tail...)},
	} {
		t.Run(tc.p.String(), func(t *testing.T) {
			pl, err := h.planFor(tc.p, []string{l.ws}, nil)
			if err != nil {
				t.Fatal(err)
			}
			got := bwrapArgs("/usr/bin/bwrap", pl, -1, l.ws, "/bin/bash", []string{"bash", "-c", "true"})
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("bwrap argv (-want +got):\n%s", d)
			}
		})
	}
}

// TestHostFallback: what a host can enforce when a mechanism is missing,
// and that confined policies are then refused, never run unconfined.
func TestHostFallback(t *testing.T) {
	ctx := context.Background()
	missing := filepath.Join(t.TempDir(), "no-bwrap")
	h := NewHost(ctx, Config{Mechanism: MechanismBubblewrap, Bwrap: missing})
	s := h.Support()
	if h.Mechanism() != "" || !slices.Equal(s.Policies, []FS{Unrestricted}) || !slices.Equal(s.Networks, []Network{NetworkOn}) || !strings.Contains(s.Reason, "no-bwrap") {
		t.Errorf("support without bubblewrap = %+v (mechanism %q)", s, h.Mechanism())
	}
	for _, p := range []Policy{{FS: WorkspaceWrite, Network: NetworkOn}, {FS: ReadOnly, Network: NetworkOff}, {FS: Unrestricted, Network: NetworkOff}} {
		if err := h.Check(p); !errors.Is(err, ErrUnavailable) {
			t.Errorf("Check(%v) = %v, want ErrUnavailable", p, err)
		}
		called := false
		_, err := h.Start(p, "/", nil, "/bin/true", []string{"true"}, func(string, []string, []*os.File) error { called = true; return nil })
		if !errors.Is(err, ErrUnavailable) || called {
			t.Errorf("Start(%v) = %v, started %v; want ErrUnavailable and nothing started", p, err, called)
		}
	}
	if err := h.Check(Default); err != nil {
		t.Errorf("Check(unrestricted) = %v", err)
	}
	var path string
	if _, err := h.Start(Default, "/", nil, "/bin/true", []string{"true"}, func(p string, _ []string, _ []*os.File) error { path = p; return nil }); err != nil || path != "/bin/true" {
		t.Errorf("Start(unrestricted) = %v, started %q; want the command as is", err, path)
	}
	var nilHost *Host
	if err := nilHost.Check(Policy{FS: ReadOnly, Network: NetworkOn}); !errors.Is(err, ErrUnavailable) {
		t.Errorf("nil host Check = %v", err)
	}

	// Auto falls back to bubblewrap when namespaces are not usable, and
	// says why; when neither works, both reasons are given.
	if os.Getuid() != 0 {
		h := NewHost(ctx, Config{Bwrap: missing})
		if r := h.Support().Reason; !strings.Contains(r, "namespaces:") || !strings.Contains(r, "no-bwrap") {
			t.Errorf("auto without root or bubblewrap: reason %q, want both", r)
		}
		if h := NewHost(ctx, Config{}); h.Mechanism() == MechanismBubblewrap && h.FellBack() == "" {
			t.Error("auto fell back to bubblewrap without saying why")
		}
	}
}

// needRoot skips (fails in CI, see testenv) where dshd's namespaces mechanism
// cannot run: it needs root (CAP_SYS_ADMIN) and Landlock ABI 6.
func needRoot(t *testing.T) {
	t.Helper()
	testenv.NeedRoot(t, "the namespaces mechanism needs CAP_SYS_ADMIN")
}

// TestNamespaces runs real commands under each mechanism and policy and
// checks what they may do.
func TestNamespaces(t *testing.T) {
	needRoot(t)
	ctx := context.Background()
	for _, mech := range []Mechanism{MechanismNamespaces, MechanismBubblewrap} {
		t.Run(string(mech), func(t *testing.T) {
			testenv.SkipMechanism(t, string(mech))
			l := newLayout(t)
			// A service socket in the workspace, hidden; another one not.
			hiddenSock, openSock := filepath.Join(l.ws, "svc.sock"), filepath.Join(l.ws, "open.sock")
			for _, p := range []string{hiddenSock, openSock} {
				ln, err := net.Listen("unix", p)
				if err != nil {
					t.Fatal(err)
				}
				defer ln.Close()
			}
			hiddenDir := filepath.Join(filepath.Dir(l.ws), "hidden")
			if err := os.MkdirAll(hiddenDir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(hiddenDir, "f"), nil, 0o644); err != nil {
				t.Fatal(err)
			}
			h := NewHost(ctx, Config{Mechanism: mech, Home: l.home, TokenFile: l.token, Hidden: []string{hiddenSock, hiddenDir}})
			if h.Mechanism() != mech {
				t.Fatalf("mechanism %q unavailable: %s", mech, h.Support().Reason)
			}
			// runIn runs script in cwd with roots as the harness's roots.
			runIn := func(p Policy, cwd string, roots []string, script string) (string, error) {
				cmd := &osexec.Cmd{Dir: cwd}
				var out strings.Builder
				cmd.Stdout, cmd.Stderr = &out, &out
				_, err := h.Start(p, cwd, roots, "/bin/bash", []string{"bash", "-c", script}, func(path string, args []string, extra []*os.File) error {
					cmd.Path, cmd.Args, cmd.ExtraFiles = path, args, extra
					return cmd.Start()
				})
				if err == nil {
					err = cmd.Wait()
				}
				return out.String(), err
			}
			run := func(p Policy, script string) (string, error) { return runIn(p, l.ws, []string{l.ws}, script) }
			// A directory outside the roots and outside /tmp (which is
			// private inside a sandbox).
			elsewhere, err := os.MkdirTemp("/var/tmp", "dshd-sandbox-test-")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.RemoveAll(elsewhere) })
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
			connect := fmt.Sprintf("exec 3<>/dev/tcp/127.0.0.1/%d", ln.Addr().(*net.TCPAddr).Port)
			tmp := fmt.Sprintf("/tmp/dshd-sandbox-test-%d", os.Getpid())
			abstract := fmt.Sprintf("dshd-sandbox-test-%d-%s", os.Getpid(), mech)
			uln, err := net.Listen("unix", "@"+abstract)
			if err != nil {
				t.Fatal(err)
			}
			defer uln.Close()
			python3, _ := osexec.LookPath("python3")
			// The listener itself is reachable from outside a sandbox.
			if python3 != "" {
				if out, err := osexec.Command(python3, "-c", `import socket; s = socket.socket(socket.AF_UNIX); s.connect("\0`+abstract+`")`).CombinedOutput(); err != nil {
					t.Fatalf("abstract socket unreachable unconfined: %v %s", err, out)
				}
			}
			t.Cleanup(func() { os.Remove(tmp) })
			for _, tc := range []struct {
				p                   Policy
				inside, outside, ok bool // writes in cwd / outside; .git writable
			}{
				{p: Policy{FS: Unrestricted, Network: NetworkOff}, inside: true, outside: true, ok: true},
				{p: Policy{FS: WorkspaceWrite, Network: NetworkOff}, inside: true},
				{p: Policy{FS: ReadOnly, Network: NetworkOn}},
			} {
				t.Run(tc.p.String(), func(t *testing.T) {
					check := func(what, script string, want bool) {
						t.Helper()
						out, err := run(tc.p, script)
						if (err == nil) != want {
							t.Errorf("%s: err %v, output %q; want success %v", what, err, out, want)
						}
					}
					check("write in cwd", "echo x > in && rm in", tc.inside)
					check("write outside", "echo x > "+filepath.Join(l.outside, "f"), tc.outside)
					check("append to .git/config", "echo '[evil]' >> .git/config", tc.ok)
					check("append to a nested .git/config", "echo '[evil]' >> a/b/.git/config", tc.ok)
					check("create a hook in .git", "mkdir -p .git/hooks && echo x > .git/hooks/pre-commit", tc.ok)
					check("read the token in the home", "cat "+l.homeToken, false)
					check("read the token outside", "grep secret "+l.token, false)
					if python3 != "" {
						connect := func(p string) string {
							return python3 + ` -c 'import socket; s = socket.socket(socket.AF_UNIX); s.connect("` + p + `")'`
						}
						check("connect to a hidden service socket", connect(hiddenSock), false)
						check("connect to a visible socket", connect(openSock), true)
					}
					check("see into a hidden directory", "test -e "+filepath.Join(hiddenDir, "f"), false)
					check("read skills", "cat "+filepath.Join(l.skills, "SKILL.md"), true)
					check("write in the home", "echo x > "+filepath.Join(l.home, "x"), false)
					check("write /tmp", "echo x > "+tmp+" && cat "+tmp, true)
					check("remount / read-write", "mount -o remount,rw / 2>/dev/null || exit 1", false)
					if tc.p.FS != Unrestricted {
						// uid 0 needs no capability to write most sysctls
						// (kernel.core_pattern runs a program as root on the
						// host); opening one for writing, without writing, is
						// harmless.
						for _, f := range []string{"/proc/sys/kernel/core_pattern", "/proc/sys/vm/drop_caches", "/sys/kernel/mm/transparent_hugepage/enabled"} {
							if exists(f) {
								check("open "+f+" for writing", "exec 3>>"+f, false)
							}
						}
					}
					check("no capabilities", "grep -q '^CapEff:.0000000000000000$' /proc/self/status", true)
					check("signal dshd", fmt.Sprintf("kill -0 %d", os.Getpid()), false)
					check("read dshd's environment", fmt.Sprintf("cat /proc/%d/environ", os.Getpid()), false)
					check("reach the host's root through dshd's /proc", fmt.Sprintf("ls /proc/%d/root/", os.Getpid()), false)
					if mech == MechanismNamespaces && python3 != "" {
						out, err := run(tc.p, python3+` -c 'import socket; s = socket.socket(socket.AF_UNIX); s.connect("\0`+abstract+`")'`)
						// Network off: abstract names belong to the network
						// namespace, so the name is not even there; on: the
						// Landlock scope refuses it.
						want := "PermissionError"
						if tc.p.Network == NetworkOff {
							want = "ConnectionRefusedError"
						}
						if err == nil || !strings.Contains(out, want) {
							t.Errorf("connect to an abstract socket of dshd: err %v, output %q; want %s", err, out, want)
						}
					}
					check("connect to a listener on 127.0.0.1", connect, tc.p.Network == NetworkOn)

					// A model's workdir is where the command starts, never a
					// root: outside the harness's roots it runs read-only.
					checkIn := func(what, cwd, script string, want bool) {
						t.Helper()
						out, err := runIn(tc.p, cwd, []string{l.ws}, script)
						if (err == nil) != want {
							t.Errorf("%s (cwd %s): err %v, output %q; want success %v", what, cwd, err, out, want)
						}
					}
					checkIn("write in a workdir outside the roots", elsewhere, "echo x > wd && rm wd", tc.outside)
					checkIn("write in the workspace from a workdir outside it", elsewhere, "echo x > "+filepath.Join(l.ws, "in")+" && rm "+filepath.Join(l.ws, "in"), tc.inside)
					// The host's /tmp is not in the view: a workdir there
					// does not exist inside.
					checkIn("start in a workdir the private /tmp lacks", l.outside, "true", tc.p.FS == Unrestricted)
					if tc.p.FS != Unrestricted {
						checkIn("write a sysctl from workdir /proc/sys/kernel", "/proc/sys/kernel", "exec 3>>core_pattern", false)
						if exists("/sys/fs/cgroup/cgroup.procs") || exists("/sys/fs/cgroup/unified/cgroup.procs") {
							checkIn("leave the cgroup from workdir /sys/fs/cgroup", "/sys/fs/cgroup", "for f in cgroup.procs unified/cgroup.procs; do test -e $f && echo $$ > $f && exit 0; done; exit 1", false)
						}
					}
					check("/dev/null", "echo x > /dev/null && head -c1 /dev/urandom >/dev/null", true)
					if tc.p.FS != Unrestricted {
						check("raw disks hidden", "ls /dev | grep -qvE '^(null|zero|full|random|urandom|tty|pts|shm|ptmx|fd|stdin|stdout|stderr|core)$' && exit 1 || exit 0", true)
						if mech == MechanismNamespaces {
							// Nodes of the sandbox's own /dev, read-write for
							// all: a chmod there would reach no host node.
							var host unix.Stat_t
							if err := unix.Stat("/dev/null", &host); err != nil {
								t.Fatal(err)
							}
							check("device nodes of its own", fmt.Sprintf(`for n in null zero full random urandom tty; do test -c /dev/$n && test "$(stat -c %%a /dev/$n)" = 666 || exit 1; done; test "$(stat -c %%d:%%i /dev/null)" != "%d:%d"`, host.Dev, host.Ino), true)
						}
					}
				})
			}
			if b, _ := os.ReadFile(filepath.Join(l.ws, ".git", "config")); strings.Contains(string(b), "evil") {
				// Only unrestricted may write it; reset between mechanisms
				// is by a fresh layout.
				t.Logf(".git/config after the unrestricted case: %q", b)
			}
		})
	}
}

// TestNamespacesOnHost: a sandbox built on one thread leaves the host's
// mounts, and dshd's own capabilities, as they were.
func TestNamespacesOnHost(t *testing.T) {
	l, h := namespacesHost(t)
	capEff := func() string {
		st, _ := os.ReadFile("/proc/self/status")
		for _, line := range strings.Split(string(st), "\n") {
			if strings.HasPrefix(line, "CapEff:") {
				return line
			}
		}
		return ""
	}
	before, caps := mustRead(t, "/proc/self/mountinfo"), capEff()
	for range 5 {
		cmd := &osexec.Cmd{}
		if _, err := h.Start(Policy{FS: WorkspaceWrite, Network: NetworkOff}, l.ws, []string{l.ws}, "/bin/true", []string{"true"}, func(p string, a []string, extra []*os.File) error {
			cmd.Path, cmd.Args, cmd.ExtraFiles = p, a, extra
			return cmd.Start()
		}); err != nil {
			t.Fatal(err)
		}
		if err := cmd.Wait(); err != nil {
			t.Fatal(err)
		}
	}
	if after := mustRead(t, "/proc/self/mountinfo"); before != after {
		t.Errorf("host mounts changed:\nbefore %s\nafter %s", before, after)
	}
	if _, err := os.ReadFile(l.homeToken); err != nil {
		t.Errorf("the host lost its view of the home: %v", err)
	}
	if c := capEff(); c != caps {
		t.Errorf("the main thread's capabilities changed: %q, were %q", c, caps)
	}
}

// TestDevNodesBound: where dshd may not make device nodes, the private
// /dev binds the host's instead, and they work.
func TestDevNodesBound(t *testing.T) {
	l, h := namespacesHost(t)
	made := mknod
	t.Cleanup(func() { mknod = made })
	mknod = func(string, uint32, int) error { return unix.EPERM }
	var host unix.Stat_t
	if err := unix.Stat("/dev/urandom", &host); err != nil {
		t.Fatal(err)
	}
	script := fmt.Sprintf(`echo x > /dev/null && head -c1 /dev/urandom >/dev/null && test "$(stat -c %%d:%%i /dev/urandom)" = "%d:%d" && echo bound`, host.Dev, host.Ino)
	var out strings.Builder
	cmd := &osexec.Cmd{Stdout: &out, Stderr: &out, Dir: l.ws}
	if _, err := h.Start(Policy{FS: WorkspaceWrite, Network: NetworkOff}, l.ws, []string{l.ws}, "/bin/bash", []string{"bash", "-c", script}, func(p string, a []string, extra []*os.File) error {
		cmd.Path, cmd.Args, cmd.ExtraFiles = p, a, extra
		return cmd.Start()
	}); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil || out.String() != "bound\n" {
		t.Errorf("err %v, output %q; want the host's nodes bound", err, out.String())
	}
}

// namespacesHost is a layout and a Host with the namespaces mechanism, as
// root (needRoot).
func namespacesHost(t *testing.T) (layout, *Host) {
	t.Helper()
	needRoot(t)
	l := newLayout(t)
	h := NewHost(context.Background(), Config{Mechanism: MechanismNamespaces, Home: l.home})
	if h.Mechanism() != MechanismNamespaces {
		t.Fatalf("namespaces unavailable: %s", h.Support().Reason)
	}
	return l, h
}

func mustRead(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestHomeInsideRoot: with the dshd home inside a writable root (home
// ~/.dsh, the agent's workspace ~), the home is still hidden and read-only:
// it is covered after the writable roots are in place, never before (a
// root attached later would show the home again).
func TestHomeInsideRoot(t *testing.T) {
	needRoot(t)
	ws := t.TempDir()
	home := filepath.Join(ws, ".dsh")
	skills := filepath.Join(home, "skills")
	if err := os.MkdirAll(skills, 0o700); err != nil {
		t.Fatal(err)
	}
	for p, body := range map[string]string{filepath.Join(home, "server.token"): "secret-in-home\n", filepath.Join(skills, "SKILL.md"): "skill\n"} {
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, mech := range []Mechanism{MechanismNamespaces, MechanismBubblewrap} {
		t.Run(string(mech), func(t *testing.T) {
			testenv.SkipMechanism(t, string(mech))
			h := NewHost(context.Background(), Config{Mechanism: mech, Home: home})
			if h.Mechanism() != mech {
				t.Fatalf("mechanism %q unavailable: %s", mech, h.Support().Reason)
			}
			for _, tc := range []struct {
				what, script string
				want         bool
			}{
				{"write in the workspace", "echo x > in && rm in", true},
				{"read the token in the home", "cat .dsh/server.token", false},
				{"list the home", "ls -A .dsh | grep -qv skills && exit 1 || exit 0", true},
				{"write in the home", "echo x > .dsh/x", false},
				{"replace the home's skills", "echo x > .dsh/skills/SKILL.md", false},
				{"read skills", "grep -q skill .dsh/skills/SKILL.md", true},
			} {
				cmd := &osexec.Cmd{Dir: ws}
				var out strings.Builder
				cmd.Stdout, cmd.Stderr = &out, &out
				_, err := h.Start(Policy{FS: WorkspaceWrite, Network: NetworkOff}, ws, []string{ws}, "/bin/bash", []string{"bash", "-c", tc.script}, func(path string, args []string, extra []*os.File) error {
					cmd.Path, cmd.Args, cmd.ExtraFiles = path, args, extra
					return cmd.Start()
				})
				if err == nil {
					err = cmd.Wait()
				}
				if (err == nil) != tc.want {
					t.Errorf("%s: err %v, output %q; want success %v", tc.what, err, out.String(), tc.want)
				}
			}
			if _, err := os.Stat(filepath.Join(home, "x")); err == nil {
				t.Error("a sandboxed command wrote into the home")
			}
		})
	}
}

// TestGitScanCache: a later search reads again only the directories that
// changed, and still finds every .git: one made deep down, one moved in
// with its directory, and none of one removed; a directory changed just
// before it was read is read again, whatever its ctime says.
func TestGitScanCache(t *testing.T) {
	root := t.TempDir()
	for _, d := range []string{"a/b/c", "x/y", ".git"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	var g gitScanner
	scan := func() ([]string, int) {
		t.Helper()
		before := g.reads
		budget := DefaultGitScanMaxEntries
		got, err := g.scan(root, &budget, DefaultGitScanMaxEntries)
		if err != nil {
			t.Fatal(err)
		}
		return got, g.reads - before
	}
	// Everything was just made: racy, so read again each time.
	if _, n := scan(); n != 6 {
		t.Errorf("first search read %d directories, want 6", n)
	}
	if _, n := scan(); n != 6 {
		t.Errorf("search right after changes read %d directories, want all 6 again (racy)", n)
	}
	// Later: nothing changed, nothing read.
	g.now = func() time.Time { return time.Now().Add(time.Hour) }
	scan()
	if got, n := scan(); n != 0 || !slices.Equal(got, []string{filepath.Join(root, ".git")}) {
		t.Errorf("unchanged tree: read %d, found %v; want 0 and the root's .git", n, got)
	}
	deep := filepath.Join(root, "a", "b", "c", ".git")
	if err := os.Mkdir(deep, 0o755); err != nil {
		t.Fatal(err)
	}
	if got, n := scan(); n != 1 || !slices.Contains(got, deep) {
		t.Errorf("after mkdir a/b/c/.git: read %d, found %v; want 1 read and it found", n, got)
	}
	// A repository moved in from outside, with its directory.
	outside := filepath.Join(t.TempDir(), "repo")
	if err := os.MkdirAll(filepath.Join(outside, "inner", ".git"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(outside, filepath.Join(root, "x", "y", "repo")); err != nil {
		t.Fatal(err)
	}
	moved := filepath.Join(root, "x", "y", "repo", "inner", ".git")
	if got, _ := scan(); !slices.Contains(got, moved) {
		t.Errorf("after moving a repository in: found %v, want %s", got, moved)
	}
	if err := os.RemoveAll(filepath.Join(root, "a")); err != nil {
		t.Fatal(err)
	}
	if got, _ := scan(); slices.Contains(got, deep) || len(g.roots[root]) != 5 {
		t.Errorf("after removing a: found %v, %d directories kept; want %s gone and 5 kept (root, x, x/y, repo, repo/inner)", got, len(g.roots[root]), deep)
	}
}

// BenchmarkGitDirs: what protecting every .git of a writable root costs a
// confined command, by the size of the root: this repository (with its
// npm packages once make deps ran), and made trees of 10,000 and 100,000
// entries (files, in directories of 100); cold is the first search of a
// root, warm a later one with nothing changed.
func BenchmarkGitDirs(b *testing.B) {
	repo, err := filepath.Abs("../..")
	if err != nil {
		b.Fatal(err)
	}
	made := func(b *testing.B, entries int) string {
		root := b.TempDir()
		for i := range entries / 100 {
			d := filepath.Join(root, fmt.Sprintf("d%04d", i))
			if err := os.Mkdir(d, 0o755); err != nil {
				b.Fatal(err)
			}
			for j := range 99 {
				if err := os.WriteFile(filepath.Join(d, fmt.Sprintf("f%02d", j)), nil, 0o644); err != nil {
					b.Fatal(err)
				}
			}
		}
		return root
	}
	for _, tc := range []struct {
		name string
		root func(b *testing.B) string
	}{
		{"repository", func(*testing.B) string { return repo }},
		{"entries=10000", func(b *testing.B) string { return made(b, 10_000) }},
		{"entries=100000", func(b *testing.B) string { return made(b, 100_000) }},
	} {
		for _, warm := range []bool{false, true} {
			b.Run(fmt.Sprintf("%s/warm=%v", tc.name, warm), func(b *testing.B) {
				root := tc.root(b)
				var g gitScanner
				g.now = func() time.Time { return time.Now().Add(time.Hour) } // nothing racy
				var entries int
				for b.Loop() {
					if !warm {
						g.roots = nil
					}
					budget := DefaultGitScanMaxEntries
					if _, err := g.scan(root, &budget, DefaultGitScanMaxEntries); err != nil {
						b.Fatal(err)
					}
					entries = DefaultGitScanMaxEntries - budget
				}
				b.ReportMetric(float64(entries), "entries")
				b.ReportMetric(float64(len(g.roots[root])), "dirs")
			})
		}
	}
}

// TestGitScanEdges: a root that is a link is followed (the harness's root
// may be one), the entries below it are not; a budget of exactly the
// entries there are suffices; the scanner keeps at most maxScannedRoots
// roots and keeps the ones it has room for.
func TestGitScanEdges(t *testing.T) {
	real := t.TempDir()
	if err := os.MkdirAll(filepath.Join(real, "sub", ".git"), 0o755); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(t.TempDir(), "ws")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	var g gitScanner
	budget := DefaultGitScanMaxEntries
	got, err := g.scan(link, &budget, DefaultGitScanMaxEntries)
	if want := []string{filepath.Join(link, "sub", ".git")}; err != nil || !slices.Equal(got, want) {
		t.Errorf("scan of a root that is a link = %v, %v; want %v", got, err, want)
	}
	used := DefaultGitScanMaxEntries - budget
	budget = used
	if _, err := (&gitScanner{}).scan(link, &budget, used); err != nil {
		t.Errorf("a budget of exactly the %d entries there are: %v", used, err)
	}

	roots := make([]string, maxScannedRoots+3)
	for i := range roots {
		roots[i] = t.TempDir()
	}
	g = gitScanner{}
	for i, r := range roots {
		budget := DefaultGitScanMaxEntries
		if _, err := g.scan(r, &budget, DefaultGitScanMaxEntries); err != nil {
			t.Fatal(err)
		}
		if i == 1 && len(g.roots) != 2 {
			t.Errorf("after two roots the scanner keeps %d, want 2", len(g.roots))
		}
	}
	if len(g.roots) != maxScannedRoots {
		t.Errorf("after %d roots the scanner keeps %d, want %d", len(roots), len(g.roots), maxScannedRoots)
	}
}

// TestKernelFSThroughLinks: a root that is a link into /proc, /sys or /dev
// is on the kernel's file systems too, and never writable.
func TestKernelFSThroughLinks(t *testing.T) {
	dir := t.TempDir()
	for _, target := range []string{"/proc/sys/kernel", "/sys/fs/cgroup", "/dev/shm"} {
		link := filepath.Join(dir, strings.ReplaceAll(strings.Trim(target, "/"), "/", "-"))
		if err := os.Symlink(target, link); err != nil {
			t.Fatal(err)
		}
		if !kernelFS(link) {
			t.Errorf("kernelFS(%s -> %s) = false", link, target)
		}
		h := &Host{}
		if pl, err := h.planFor(Policy{FS: WorkspaceWrite, Network: NetworkOff}, []string{link}, nil); err != nil || len(pl.writable) != 0 {
			t.Errorf("plan for a root linked to %s: writable %v, %v; want none", target, pl.writable, err)
		}
	}
	if kernelFS(dir) {
		t.Errorf("kernelFS(%s) = true", dir)
	}
}
