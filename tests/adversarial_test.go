package tests

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dshd/dshd/internal/testenv"
)

// The adversarial suite: what a hostile model tries from inside its own bash
// tool calls, over the HTTP tools route and over /mcp, under each confined
// policy (network off) and each mechanism. Every attack also runs as an
// agent whose policy is unrestricted, and must get out there: the baseline
// that proves the attack is real, so a row that blocks nothing cannot pass.
//
// A new escape found later becomes a row here.

// attack is one row: what the model sends, and how the test sees that it
// got out (besides the command printing ESCAPED).
type attack struct {
	name string
	// workdir is the bash tool's workdir argument ("" leaves it out).
	workdir string
	// command is the bash tool's command; {id} is replaced by a name unique
	// to each call.
	command string
	// escaped, when set, decides from the host's side (a file that
	// appeared, a datagram received) or the output whether the attack
	// worked; otherwise the output containing ESCAPED does.
	escaped func(t *testing.T, id, out string) bool
}

// advEnv is what one mechanism's server and agents give the rows.
type advEnv struct {
	s                 *testServer
	base              string // outside /tmp, which a sandbox replaces with its own
	outside, otherWS  string
	tokenPath         string
	pid               int // dshd's
	port              string
	victimPID         int // a process of another agent
	udp               *net.UDPConn
	udpGot            chan string
	v6Port            int
	abstract, hidSock string
}

func TestAdversarial(t *testing.T) {
	t.Parallel()
	testenv.NeedRoot(t, "the adversarial suite runs the namespaces mechanism")
	mcp := startMCPClient(t)
	for _, mech := range sandboxMechanisms {
		t.Run(mech, func(t *testing.T) { testAdversarial(t, mcp, mech) })
	}
}

func testAdversarial(t *testing.T, mcp *mcpClient, mech string) {
	testenv.SkipMechanism(t, mech)
	base, err := os.MkdirTemp("/var/tmp", "dshd-adversarial-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	env := &advEnv{base: base, outside: filepath.Join(base, "outside"), otherWS: filepath.Join(base, "other")}
	for _, d := range []string{env.outside, env.otherWS} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// A service socket like the container runtime's, hidden by config.
	env.hidSock = filepath.Join(base, "docker.sock")
	sock, err := net.Listen("unix", env.hidSock)
	if err != nil {
		t.Fatal(err)
	}
	defer sock.Close()
	go acceptAndClose(sock)

	home := filepath.Join(base, "home")
	env.s = startServer(t, withHome(home), withConfig(fmt.Sprintf("sandbox:\n  mechanism: %s\n  hiddenPaths: [%s, /run/docker.sock, /var/run/docker.sock, /run/systemd/private, /run/dbus/system_bus_socket]\n", mech, env.hidSock)))
	needSandbox(t, env.s)
	env.tokenPath = filepath.Join(home, "server.token")
	env.pid = env.s.cmd.Process.Pid
	u, err := url.Parse(env.s.URL)
	if err != nil {
		t.Fatal(err)
	}
	env.port = u.Port()

	// Listeners a model must not reach with the network off.
	uc, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer uc.Close()
	env.udp, env.udpGot = uc, make(chan string, 64)
	go func() {
		buf := make([]byte, 512)
		for {
			n, _, err := uc.ReadFrom(buf)
			if err != nil {
				return
			}
			env.udpGot <- strings.TrimSpace(string(buf[:n]))
		}
	}()
	if ln6, err := net.Listen("tcp6", "[::1]:0"); err == nil {
		defer ln6.Close()
		go acceptAndClose(ln6)
		env.v6Port = ln6.Addr().(*net.TCPAddr).Port
	}
	env.abstract = fmt.Sprintf("dshd-adversarial-%d-%s", os.Getpid(), mech)
	abs, err := net.Listen("unix", "@"+env.abstract)
	if err != nil {
		t.Fatal(err)
	}
	defer abs.Close()
	go acceptAndClose(abs)

	// Another agent's process, for signals and ptrace.
	var other sandboxAgent
	if st := env.s.DoJSON(t, "POST", "/agents", map[string]any{"cwd": env.otherWS}, &other); st != 201 {
		t.Fatalf("POST /agents (other) = %d", st)
	}
	var victim struct {
		ID  string `json:"id"`
		PID int    `json:"pid"`
	}
	if st := env.s.DoJSON(t, "POST", "/exec", map[string]any{"command": "sleep 300", "agentId": other.ID, "background": true}, &victim); st != 202 || victim.PID == 0 {
		t.Fatalf("victim job = %d %+v", st, victim)
	}
	defer env.s.Do(t, "DELETE", "/jobs/"+victim.ID, nil)
	env.victimPID = victim.PID

	rows := adversarialRows(env)
	policies := []sandboxPolicy{{"unrestricted", "on"}, {"workspace-write", "off"}, {"read-only", "off"}}
	var seq atomic.Int64
	for _, pol := range policies {
		t.Run(pol.Policy, func(t *testing.T) {
			ws := filepath.Join(base, "ws-"+pol.Policy)
			makeWorkspace(t, ws)
			var a sandboxAgent
			if st := env.s.DoJSON(t, "POST", "/agents", map[string]any{"cwd": ws, "sandbox": pol}, &a); st != 201 {
				t.Fatalf("POST /agents = %d", st)
			}
			session := "adv-" + mech + "-" + pol.Policy
			mcp.connect(env.s, session, "?agentId="+a.ID, nil)
			transports := map[string]func(t *testing.T, args map[string]any) (string, bool){
				"http": func(t *testing.T, args map[string]any) (string, bool) {
					var r toolResult
					if st := env.s.DoJSON(t, "POST", "/agents/"+a.ID+"/tools/bash", map[string]any{"arguments": args}, &r); st != http.StatusOK {
						t.Errorf("POST tools/bash %v = %d, want 200 (a tool result, never a server error)", args, st)
					}
					return r.Text, r.IsError
				},
				"mcp": func(t *testing.T, args map[string]any) (string, bool) {
					r := mcp.call(session, "bash", args)
					return r.text(), r.Result.IsError
				},
			}
			// Workdirs that cannot be: a tool error the model reads, never a
			// server error.
			t.Run("bad workdirs", func(t *testing.T) {
				file := filepath.Join(ws, "a-file")
				if err := os.WriteFile(file, nil, 0o644); err != nil {
					t.Fatal(err)
				}
				link := filepath.Join(ws, "link-to-file")
				if err := os.Symlink(file, link); err != nil && !os.IsExist(err) {
					t.Fatal(err)
				}
				for _, wd := range []string{file, link, filepath.Join(ws, "missing"), "/proc/self/fd/0", "/dev/null", "/proc/1/root/nonexistent", strings.Repeat("x/", 3000)} {
					for _, tr := range []string{"http", "mcp"} {
						out, isErr := transports[tr](t, map[string]any{"command": "echo started", "workdir": wd})
						if !isErr || strings.Contains(out, "started") {
							t.Errorf("%s: workdir %.60q: isError %v, %q; want a tool error and nothing run", tr, wd, isErr, out)
						}
					}
				}
			})
			for _, row := range rows {
				t.Run(row.name, func(t *testing.T) {
					for _, tr := range []string{"http", "mcp"} {
						id := fmt.Sprintf("adv%d", seq.Add(1))
						args := map[string]any{"command": strings.ReplaceAll(row.command, "{id}", id)}
						if row.workdir != "" {
							args["workdir"] = row.workdir
						}
						out, isErr := transports[tr](t, args)
						var escaped bool
						if row.escaped != nil {
							escaped = row.escaped(t, id, out)
						} else {
							escaped = strings.Contains(out, "ESCAPED")
						}
						if pol.Policy == "unrestricted" && !escaped {
							t.Errorf("%s: the attack did not work unconfined, so this row proves nothing (isError %v): %q", tr, isErr, out)
						}
						if pol.Policy != "unrestricted" && escaped {
							t.Errorf("%s: ESCAPED under %s, network off (isError %v): %q", tr, pol.Policy, isErr, out)
						}
					}
				})
			}
		})
	}
}

// makeWorkspace makes an agent's workspace: a repository, one nested one
// level down, one deep down behind 4,100 directories.
func makeWorkspace(t *testing.T, ws string) {
	t.Helper()
	for _, d := range []string{".git/hooks", "sub/.git/hooks", "deep/a/b/c/d/e/.git/hooks"} {
		if err := os.MkdirAll(filepath.Join(ws, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 4100 {
		if err := os.Mkdir(filepath.Join(ws, fmt.Sprintf("zz%04d", i)), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Join(ws, "zz4099", "late", ".git", "hooks"), 0o755); err != nil {
		t.Fatal(err)
	}
}

func acceptAndClose(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		c.Close()
	}
}

// hostFile is an escaped check: the file exists on the host (and is
// removed, so the next call starts clean).
func hostFile(path func(id string) string) func(t *testing.T, id, out string) bool {
	return func(t *testing.T, id, out string) bool {
		p := path(id)
		_, err := os.Lstat(p)
		os.Remove(p)
		return err == nil
	}
}

func adversarialRows(env *advEnv) []attack {
	pid := strconv.Itoa(env.pid)
	victim := strconv.Itoa(env.victimPID)
	homeDir, _ := os.UserHomeDir()
	cgroupRoot := "/sys/fs/cgroup"
	if _, err := os.Stat("/sys/fs/cgroup/unified/cgroup.procs"); err == nil {
		cgroupRoot = "/sys/fs/cgroup/unified"
	}
	py := func(code string) string { return `python3 -c '` + code + `' && echo ESCAPED` }
	rows := []attack{
		// A model's workdir is where the command starts, never a root.
		{name: "workdir /etc", workdir: "/etc", command: "touch dshd-{id} && echo ESCAPED",
			escaped: hostFile(func(id string) string { return "/etc/dshd-" + id })},
		{name: "workdir /proc/sys/kernel", workdir: "/proc/sys/kernel", command: "exec 3>>core_pattern && echo ESCAPED"},
		{name: "workdir the cgroup root", workdir: cgroupRoot, command: "exec 3>>cgroup.procs && echo ESCAPED"},
		{name: "workdir another agent's workspace", workdir: "../other", command: "touch {id} && echo ESCAPED",
			escaped: hostFile(func(id string) string { return filepath.Join(env.otherWS, id) })},
		{name: "workdir the user's home", workdir: homeDir, command: "touch dshd-{id} && echo ESCAPED",
			escaped: hostFile(func(id string) string { return filepath.Join(homeDir, "dshd-"+id) })},
		{name: "workdir the dshd home", workdir: env.s.Home, command: "touch planted-{id} && echo ESCAPED",
			escaped: hostFile(func(id string) string { return filepath.Join(env.s.Home, "planted-"+id) })},
		// Paths named in the command.
		{name: "write outside through ..", command: "echo x > ../{id} && echo ESCAPED",
			escaped: hostFile(func(id string) string { return filepath.Join(env.base, id) })},
		{name: "write outside through a symlink", command: "ln -sf " + env.outside + "/{id} link-{id}; echo x > link-{id} && echo ESCAPED",
			escaped: hostFile(func(id string) string { return filepath.Join(env.outside, id) })},
		{name: "write /etc", command: "echo x > /etc/dshd-{id} && echo ESCAPED",
			escaped: hostFile(func(id string) string { return "/etc/dshd-" + id })},
		{name: "write the host's /dev/shm", command: "echo x > /dev/shm/dshd-{id}",
			escaped: hostFile(func(id string) string { return "/dev/shm/dshd-" + id })},
		{name: "write .git/hooks", command: "echo x > .git/hooks/{id} && echo ESCAPED"},
		{name: "write a nested .git/hooks", command: "echo x > sub/.git/hooks/{id} && echo ESCAPED"},
		{name: "write a .git/hooks six levels down", command: "echo x > deep/a/b/c/d/e/.git/hooks/{id} && echo ESCAPED"},
		{name: "write a .git/hooks behind 4,100 directories", command: "echo x > zz4099/late/.git/hooks/{id} && echo ESCAPED"},
		// The token and dshd itself.
		{name: "read the token file", command: "cat " + env.tokenPath,
			escaped: func(t *testing.T, id, out string) bool { return strings.Contains(out, env.s.Token) }},
		{name: "read dshd's environment", command: "tr '\\0' '\\n' < /proc/" + pid + "/environ | grep -q PATH= && echo ESCAPED"},
		{name: "reach the token through dshd's root", command: "cat /proc/" + pid + "/root" + env.tokenPath,
			escaped: func(t *testing.T, id, out string) bool { return strings.Contains(out, env.s.Token) }},
		{name: "list dshd's cwd", command: "ls /proc/" + pid + "/cwd/ >/dev/null && echo ESCAPED"},
		// Listing the names needs no more than the uid; following one is
		// what would reach dshd's files and sockets.
		{name: "follow dshd's descriptors", command: "for f in /proc/" + pid + "/fd/*; do readlink $f >/dev/null && echo ESCAPED && break; done"},
		{name: "connect to dshd's port", command: "exec 3<>/dev/tcp/127.0.0.1/" + env.port + " && echo ESCAPED"},
		{name: "send UDP to a loopback listener", command: "echo {id} > /dev/udp/127.0.0.1/" + strconv.Itoa(env.udp.LocalAddr().(*net.UDPAddr).Port),
			escaped: func(t *testing.T, id, out string) bool {
				deadline := time.After(time.Second)
				for {
					select {
					case got := <-env.udpGot:
						if got == id {
							return true
						}
					case <-deadline:
						return false
					}
				}
			}},
		{name: "connect to a hidden service socket", command: py(`import socket; s = socket.socket(socket.AF_UNIX); s.connect("` + env.hidSock + `")`)},
		{name: "connect to an abstract socket", command: py(`import socket; s = socket.socket(socket.AF_UNIX); s.connect("\0` + env.abstract + `")`)},
		{name: "unshare a mount namespace", command: "unshare -m true && echo ESCAPED"},
		{name: "signal another agent's process", command: "kill -0 " + victim + " && echo ESCAPED"},
		{name: "ptrace another agent's process", command: py(`import ctypes, sys; l = ctypes.CDLL(None, use_errno=True); sys.exit(0 if l.ptrace(0x4206, ` + victim + `, 0, 0) == 0 else 1)`)},
	}
	if env.v6Port != 0 {
		rows = append(rows, attack{name: "connect to loopback over IPv6", command: "exec 3<>/dev/tcp/::1/" + strconv.Itoa(env.v6Port) + " && echo ESCAPED"})
	}
	return rows
}

// TestAdversarialWorkspaceApply: the attacks on workspace/apply, where dshd
// itself writes a parent's view (issue 39). A hostile model's bash in the
// parent leaves a process running that waits for an apply's staging and
// then swaps a directory the child wrote into for a link to a directory
// outside, or to the dshd home; the child's own job swaps a directory of its
// layer for a link to the home in a loop while the apply runs; and apply is
// aimed at the home by name and through links. Under both mechanisms and
// both containments (a process a job leaves running is counted per job's
// cgroup, or traced by process group), with the parent unrestricted and
// confined.
//
// The apply must be refused (409 workspace_busy while a writer of the source
// or the target runs) or write nothing outside the target and read nothing
// of the home into a view. Each attack has its baseline: the same swap,
// then a plain path-based write (what apply did before it worked by
// descriptor, done here by the test as root through the parent's view)
// lands outside, and a path-based read of the view reads the token; the
// same apply aimed at an ordinary directory writes there.
func TestAdversarialWorkspaceApply(t *testing.T) {
	t.Parallel()
	testenv.NeedRoot(t, "snapshot workspaces and the namespaces mechanism need root")
	for _, mech := range sandboxMechanisms {
		for _, containment := range []string{"cgroup", "group"} {
			t.Run(mech+"/"+containment, func(t *testing.T) {
				t.Parallel()
				testenv.SkipMechanism(t, mech)
				testAdversarialApply(t, mech, containment)
			})
		}
	}
}

func testAdversarialApply(t *testing.T, mech, containment string) {
	base, err := os.MkdirTemp("/var/tmp", "dshd-adversarial-apply-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	outside := filepath.Join(base, "outside")
	home := filepath.Join(base, "home")
	if err := os.MkdirAll(outside, 0o755); err != nil {
		t.Fatal(err)
	}
	s := startServer(t, withHome(home), withConfig(fmt.Sprintf("sandbox:\n  mechanism: %s\njobs:\n  graceMs: 200\n  containment: %s\n", mech, containment)))
	needSandbox(t, s)
	needSnapshots(t, s)
	mark := randomMark(t)
	t.Cleanup(func() { killPIDs(survivorsNow(mark)) })
	var seq atomic.Int64

	// idle waits until agent's jobs have ended and left nothing running (a
	// job's remaining processes are counted every 200 ms).
	idle := func(t *testing.T, agent string) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); ; {
			var jobs []struct {
				State     string          `json:"state"`
				Remaining json.RawMessage `json:"remaining"`
			}
			s.DoJSON(t, "GET", "/jobs?agentId="+agent, nil, &jobs)
			n := 0
			for _, j := range jobs {
				if j.State == "running" || j.Remaining != nil {
					n++
				}
			}
			if n == 0 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("agent %s's jobs still run", agent)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	// fork makes a parent under pol on a fresh workspace with a directory
	// sub, and a snapshot child that wrote sub/new.txt.
	fork := func(t *testing.T, pol sandboxPolicy) (ws, parent, child string) {
		t.Helper()
		ws = filepath.Join(base, fmt.Sprintf("ws%d", seq.Add(1)))
		if err := os.MkdirAll(filepath.Join(ws, "sub"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(ws, "sub", "keep.txt"), []byte("keep\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		p := s.newAgent(t, "/agents", map[string]any{"cwd": ws, "sandbox": pol})
		c := s.newAgent(t, "/agents/"+p.ID+"/fork", map[string]any{"workspace": "snapshot", "sandbox": map[string]any{"policy": "workspace-write", "network": "off"}})
		s.run(t, c.ID, "echo child data > sub/new.txt")
		// What follows is refused or not for what the attack does, not
		// for the count of this job's processes (renewed every 200 ms).
		idle(t, c.ID)
		return ws, p.ID, c.ID
	}
	// leave has agent's bash leave a process running (its own session,
	// marked) that runs script; it returns the tool call's job and the
	// process's mark.
	leave := func(t *testing.T, agent, script string) (jobID, m string) {
		t.Helper()
		m = fmt.Sprintf("%s/%d;", mark, seq.Add(1))
		cmd := fmt.Sprintf("setsid -f env %s='%s' bash -c '%s' </dev/null >/dev/null 2>&1; echo left", markEnv, m, script)
		r := s.callTool(t, agent, "bash", map[string]any{"command": cmd})
		if r.IsError || !strings.Contains(r.Text, "left") {
			t.Fatalf("the model's call: %+v", r)
		}
		deadline := time.Now().Add(15 * time.Second)
		for {
			if pids, _ := marked(m); len(pids) > 0 {
				return r.JobID, m
			}
			if time.Now().After(deadline) {
				t.Fatalf("the process the call left (%s) is not running", m)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	// leaveExec is leave through the harness's POST /exec: no tool call,
	// so no checkpoint freezes the layer the process goes on writing
	// (under group containment, which does not see a process that left
	// its job's group, a tool call's checkpoint would).
	leaveExec := func(t *testing.T, agent, script string) (jobID, m string) {
		t.Helper()
		m = fmt.Sprintf("%s/%d;", mark, seq.Add(1))
		s.run(t, agent, fmt.Sprintf("setsid -f env %s='%s' bash -c '%s' </dev/null >/dev/null 2>&1", markEnv, m, script))
		deadline := time.Now().Add(15 * time.Second)
		for {
			if pids, _ := marked(m); len(pids) > 0 {
				return "", m
			}
			if time.Now().After(deadline) {
				t.Fatalf("the process the command left (%s) is not running", m)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	// stop ends what agent's jobs left running, by the API first.
	stop := func(t *testing.T, agent, m string) {
		t.Helper()
		var jobs []job
		s.DoJSON(t, "GET", "/jobs?agentId="+agent, nil, &jobs)
		for _, j := range jobs {
			s.Do(t, "DELETE", "/jobs/"+j.ID, nil).Body.Close()
		}
		if containment == "group" {
			// A process in a session of its own is not traced to its job
			// there: it is stopped at shutdown, or here.
			killPIDs(survivorsNow(m))
		}
		if left := survivors(m, 10*time.Second); len(left) > 0 {
			killPIDs(left)
			t.Errorf("cancelling agent %s's jobs left %v running", agent, left)
		}
	}
	token := s.Token
	// tokenInLayers reports whether any file of any layer holds the token.
	tokenInLayers := func(t *testing.T) bool {
		t.Helper()
		found := false
		filepath.Walk(filepath.Join(home, "workspaces", "layers"), func(p string, fi os.FileInfo, err error) error {
			if err == nil && fi.Mode().IsRegular() {
				if b, err := os.ReadFile(p); err == nil && strings.Contains(string(b), token) {
					t.Logf("the token is in %s", p)
					found = true
				}
			}
			return nil
		})
		return found
	}

	// The swap a leftover of the parent makes once apply stages.
	swap := func(target string) string {
		return "until ls -d .dshd-apply-* >/dev/null 2>&1; do sleep 0.005; done; mv sub sub.orig && ln -s " + target + " sub && touch swapped; sleep 300"
	}
	for _, target := range []struct{ name, dir string }{{"outside", outside}, {"the dshd home", home}} {
		t.Run("parent's leftover swaps a directory for a link to "+target.name+" during staging", func(t *testing.T) {
			// Baseline: the swap happens when staging shows, and a write by
			// path through the parent's view then lands in target.dir.
			t.Run("baseline", func(t *testing.T) {
				ws, p, _ := fork(t, sandboxPolicy{"unrestricted", "on"})
				_, m := leave(t, p, swap(target.dir))
				defer stop(t, p, m)
				pids, _ := marked(m)
				view := fmt.Sprintf("/proc/%d/root%s", pids[0], ws)
				if err := os.Mkdir(filepath.Join(view, ".dshd-apply-baseline"), 0o700); err != nil {
					t.Fatal(err)
				}
				deadline := time.Now().Add(15 * time.Second)
				for {
					if _, err := os.Lstat(filepath.Join(view, "swapped")); err == nil {
						break
					}
					if time.Now().After(deadline) {
						t.Fatal("the leftover did not swap sub once staging showed")
					}
					time.Sleep(10 * time.Millisecond)
				}
				landed := filepath.Join(target.dir, "new.txt")
				if err := os.WriteFile(filepath.Join(view, "sub", "new.txt"), []byte("child data\n"), 0o644); err != nil {
					t.Fatal(err)
				}
				if _, err := os.Stat(landed); err != nil {
					t.Errorf("a path-based write through the swapped directory did not land in %s: the attack proves nothing", target.dir)
				}
				os.Remove(landed)
				if target.dir == home {
					if b, err := os.ReadFile(filepath.Join(view, "sub", "server.token")); err != nil || strings.TrimSpace(string(b)) != token {
						t.Errorf("a path-based read through the swapped directory did not read the token: %v", err)
					}
				}
			})
			for _, pol := range []sandboxPolicy{{"unrestricted", "on"}, {"workspace-write", "off"}} {
				t.Run(pol.Policy, func(t *testing.T) {
					_, p, c := fork(t, pol)
					_, m := leave(t, p, swap(target.dir))
					defer stop(t, p, m)
					var pr wsProblem
					st := s.DoJSON(t, "POST", "/agents/"+c+"/workspace/apply", map[string]any{}, &pr)
					t.Logf("apply with the parent's leftover running = %d %s %s", st, pr.Code, pr.Detail)
					refused := st == 409 && pr.Code == "workspace_busy"
					if containment == "cgroup" && !refused {
						t.Errorf("apply while the parent's leftover runs in its job's cgroup = %d %s, want 409 workspace_busy", st, pr.Code)
					}
					// Refused or not, nothing left the view and nothing of the
					// home came into one.
					if _, err := os.Lstat(filepath.Join(target.dir, "new.txt")); err == nil {
						t.Errorf("apply (%d) wrote the child's file into %s", st, target.dir)
					}
					if tokenInLayers(t) {
						t.Errorf("the token was read into a workspace layer")
					}
					stop(t, p, m)
					if !refused {
						return // the leftover changed the view: what follows does not hold
					}
					if containment == "group" {
						// The leftover left its job's process group, which group
						// containment does not count: the refusal is the commit's
						// rollback after the swap, which stays (the leftover made
						// it). Rolled back: nothing of the child's is in the view
						// and no staging is left.
						idle(t, p)
						if out := s.run(t, p, "cat sub.orig/new.txt 2>/dev/null; ls -a | grep -c dshd-apply || true"); out != "0\n" {
							t.Errorf("the parent's view after a rolled back apply: %q", out)
						}
						return
					}
					// With the leftover gone, the apply goes through, into the
					// view.
					idle(t, p)
					if st := s.DoJSON(t, "POST", "/agents/"+c+"/workspace/apply", map[string]any{}, &pr); st != 200 {
						t.Errorf("apply once the leftover is gone = %d %+v", st, pr)
					}
					if out := s.run(t, p, "cat sub/new.txt sub/keep.txt; ls -a | grep -c dshd-apply || true"); out != "child data\nkeep\n0\n" {
						t.Errorf("the parent's view after the apply: %q", out)
					}
					if _, err := os.Lstat(filepath.Join(target.dir, "new.txt")); err == nil {
						t.Errorf("the child's file is in %s", target.dir)
					}
				})
			}
		})
	}

	t.Run("child's job swaps a directory of its layer for a link to the dshd home while apply runs", func(t *testing.T) {
		// The link stands for 10 ms at a time: long enough for a read by
		// path to hit it (the baseline), often enough to race an apply.
		// (No rename: overlayfs refuses to rename a directory of a lower
		// layer, and mv would copy it instead.)
		loop := "while :; do rm -rf sub; ln -s " + home + " sub; sleep 0.01; rm -f sub; mkdir sub && echo data > sub/new.txt; sleep 0.005; done"
		// Baseline: the link shows in the child's layer, and a read by path
		// through the layer reads the token.
		t.Run("baseline", func(t *testing.T) {
			_, _, c := fork(t, sandboxPolicy{"unrestricted", "on"})
			_, m := leaveExec(t, c, loop)
			defer stop(t, c, m)
			var a struct {
				Workspace struct{ Path string } `json:"workspace"`
			}
			s.DoJSON(t, "GET", "/agents/"+c, nil, &a)
			deadline := time.Now().Add(15 * time.Second)
			// dshd reads a child's layer on the host, where its writes
			// land: the link the loop makes in its view shows there, and
			// a read by path through it reads the token.
			read := func() bool {
				var st struct {
					Agents map[string]struct {
						Upper  string
						Layers []string
					} `json:"agents"`
				}
				b, err := os.ReadFile(filepath.Join(home, "workspaces", "state.json"))
				if err != nil || json.Unmarshal(b, &st) != nil {
					return false
				}
				// Its upper layer, or (under group containment, which does
				// not see a process that left its job's group) the layer a
				// checkpoint froze while the loop went on writing it.
				a := st.Agents[c]
				for _, l := range append(a.Layers, a.Upper) {
					b, err := os.ReadFile(filepath.Join(home, "workspaces", "layers", l, "fs", "sub", "server.token"))
					if err == nil && strings.TrimSpace(string(b)) == token {
						return true
					}
				}
				return false
			}
			for {
				if read() {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("a path-based read through the child's swapping directory never read the token: the attack proves nothing")
				}
				time.Sleep(time.Millisecond)
			}
		})
		for _, pol := range []sandboxPolicy{{"unrestricted", "on"}, {"workspace-write", "off"}} {
			t.Run(pol.Policy, func(t *testing.T) {
				_, p, c := fork(t, pol)
				_, m := leaveExec(t, c, loop)
				defer stop(t, c, m)
				for range 20 {
					var pr wsProblem
					st := s.DoJSON(t, "POST", "/agents/"+c+"/workspace/apply", map[string]any{}, &pr)
					if st == 409 && pr.Code == "workspace_busy" {
						continue
					}
					if containment == "cgroup" {
						t.Errorf("apply while the child's job runs in its cgroup = %d %s, want 409 workspace_busy", st, pr.Code)
					}
					t.Logf("apply with the child's job swapping = %d %s %s", st, pr.Code, pr.Detail)
				}
				if tokenInLayers(t) {
					t.Errorf("the token was read into a workspace layer")
				}
				stop(t, c, m)
				// A link the child made is applied as the link it is (an
				// unrestricted parent may read through it, as it may read the
				// home anyway); what must never be there is the token's
				// contents in a file of the view.
				if out := s.run(t, p, "find . -name '.dshd-apply-*'; find . -type f -exec grep -lF -- '"+token+"' {} + 2>/dev/null || true"); out != "" {
					t.Errorf("the parent's view after the applies: %q", out)
				}
			})
		}
	})

	t.Run("apply aimed at the dshd home", func(t *testing.T) {
		_, _, c := fork(t, sandboxPolicy{"workspace-write", "off"})
		links := filepath.Join(base, "links")
		plain := filepath.Join(base, "plain")
		for _, d := range []string{links, plain} {
			if err := os.MkdirAll(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		for name, to := range map[string]string{"home": home, "sessions": filepath.Join(home, "sessions"), "base": base, "plain": plain} {
			if err := os.Symlink(to, filepath.Join(links, name)); err != nil {
				t.Fatal(err)
			}
		}
		// Baseline: the same requests aimed at an ordinary directory, by
		// name and through a link on the way, write there.
		for _, dir := range []string{plain, filepath.Join(links, "base", "plain")} {
			if st := s.DoJSON(t, "POST", "/agents/"+c+"/workspace/apply", map[string]any{"directory": dir}, nil); st != 200 {
				t.Errorf("baseline: apply to %s = %d", dir, st)
			}
			if _, err := os.Stat(filepath.Join(plain, "sub", "new.txt")); err != nil {
				t.Errorf("baseline: apply to %s wrote nothing there", dir)
			}
			os.RemoveAll(filepath.Join(plain, "sub"))
		}
		if err := os.MkdirAll(filepath.Join(home, "sessions"), 0o700); err != nil {
			t.Fatal(err)
		}
		for _, dir := range []string{
			filepath.Join(home, "sessions"), home, filepath.Join(home, "workspaces"), filepath.Join(home, "workspaces", "layers"),
			filepath.Join(links, "home"), filepath.Join(links, "sessions"), filepath.Join(links, "home", "sessions"),
			filepath.Join(links, "base", "home", "sessions"), filepath.Join(home, "sessions", "..", "sessions"),
		} {
			var pr wsProblem
			if st := s.DoJSON(t, "POST", "/agents/"+c+"/workspace/apply", map[string]any{"directory": dir}, &pr); st != 422 || pr.Code != "invalid_workspace" {
				t.Errorf("apply to %s = %d %+v, want 422 invalid_workspace", dir, st, pr)
			}
		}
		filepath.Walk(home, func(p string, fi os.FileInfo, err error) error {
			if err == nil && fi.Name() == "new.txt" && !strings.Contains(p, filepath.Join(home, "workspaces", "layers")) {
				t.Errorf("an apply aimed at the home wrote %s", p)
			}
			return nil
		})
	})
}

// TestAdversarialFiles: the file routes under hostile paths, each beside a
// baseline that proves the path really leads where the attack wants. The
// model's own bash plants the links (a tool call, as a model would); the
// harness routes are then aimed through them. Writes never follow a link,
// whatever the policy; reads never reach the token.
func TestAdversarialFiles(t *testing.T) {
	t.Parallel()
	testenv.NeedRoot(t, "both mechanisms need root")
	for _, mech := range sandboxMechanisms {
		t.Run(mech, func(t *testing.T) {
			t.Parallel()
			testAdversarialFiles(t, mech)
		})
	}
}

// fileAttack is one row of TestAdversarialFiles: a request and its refusal.
type fileAttack struct {
	name, method, path string
	body               []byte
	status             int
	code               string
	gone               string // a file outside that must not appear
}

func testAdversarialFiles(t *testing.T, mech string) {
	s := startSandboxServer(t, mech)
	base, err := os.MkdirTemp("/var/tmp", "dshd-adversarial-files-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	outside := filepath.Join(base, "outside")
	token := filepath.Join(s.Home, "server.token")
	mk := func(name, pol string) (ws, id string) {
		ws = filepath.Join(base, name)
		if err := os.MkdirAll(ws, 0o755); err != nil {
			t.Fatal(err)
		}
		id = s.newAgent(t, "/agents", map[string]any{"cwd": ws, "sandbox": map[string]any{"policy": pol}}).ID
		// The model plants its links with its own bash.
		if r := s.callTool(t, id, "bash", map[string]any{"command": "ln -s " + outside + " link && ln -s " + token + " toklink && echo planted"}); !strings.Contains(r.Text, "planted") {
			t.Fatalf("planting the links: %q", r.Text)
		}
		return ws, id
	}
	if err := os.MkdirAll(outside, 0o755); err != nil {
		t.Fatal(err)
	}
	_, confined := mk("confined", "workspace-write")
	_, free := mk("free", "unrestricted")
	bash := func(id, cmd string) string { return s.callTool(t, id, "bash", map[string]any{"command": cmd}).Text }
	exists := func(p string) bool { _, err := os.Lstat(filepath.Join(outside, p)); return err == nil }
	for _, v := range []string{"victim", "victim-bash", "victim-mv-bash"} {
		if err := os.WriteFile(filepath.Join(outside, v), []byte("v"), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	// Baselines: the links lead out, the model's unconfined bash gets there.
	bash(free, "echo x > link/pwned-bash; echo x > ../outside/dotdot-bash; rm link/victim-bash")
	if !exists("pwned-bash") || !exists("dotdot-bash") || exists("victim-bash") {
		t.Fatal("baseline: the unconfined bash did not write and remove through the link and ../: the attack rows below prove nothing")
	}
	if got := bash(free, "cat toklink"); !strings.Contains(got, s.Token) {
		t.Fatalf("baseline: the planted link does not lead to the token (the unconfined bash read %q)", got)
	}
	if st, _, _ := s.fileReq(t, "PUT", "/agents/"+free+"/files/"+outside+"/abs-free", []byte("x")); st != 200 || !exists("abs-free") {
		t.Fatalf("baseline: an absolute PUT as the unrestricted agent = %d, wrote %v", st, exists("abs-free"))
	}
	// A move's baselines: the unconfined bash moves a file out through
	// the link, and the unrestricted agent's move (which protects no .git)
	// goes into a .git.
	bash(free, "mv link/victim-mv-bash stolen-bash")
	if exists("victim-mv-bash") {
		t.Fatal("baseline: the unconfined bash did not move a file out through the link")
	}
	for _, id := range []string{confined, free} {
		if r := bash(id, "mkdir -p .git && echo src > mvsrc && echo src > mvsrc2 && echo made"); !strings.Contains(r, "made") {
			t.Fatalf("making the move's sources: %q", r)
		}
	}
	if st, _, b := s.fileReq(t, "POST", "/agents/"+free+"/files/mvsrc2?op=move&to=.git/hooks/pre-commit&parents=true", nil); st != 200 {
		t.Fatalf("baseline: the unrestricted agent's move into .git = %d %s", st, b)
	}
	// A watch's baselines: the route watches the workspace, and the
	// unconfined bash sees the home's names and dshd's /proc.
	if w := s.watch(t, "/agents/"+free+"/files/?watch=true&recursive=true", ""); w.status != 200 {
		t.Fatalf("baseline: a watch of the unrestricted agent's workspace = %d %s", w.status, w.body)
	} else {
		w.cancel()
	}
	if got := bash(free, "ls "+s.Home+"; cat /proc/"+fmt.Sprint(s.cmd.Process.Pid)+"/comm"); !strings.Contains(got, "server.token") || !strings.Contains(got, "dshd") {
		t.Fatalf("baseline: the unconfined bash does not see the home and dshd's /proc: %q", got)
	}
	tarThrough := tarOf(t, []tarEntry{{name: "link/pwned-tar", body: "x", mode: 0o644}})
	tarDotdot := tarOf(t, []tarEntry{{name: "../outside/pwned-tar2", body: "x", mode: 0o644}})

	for _, id := range []string{confined, free} {
		who := map[string]string{confined: "confined", free: "unrestricted"}[id]
		f, a := "/agents/"+id+"/files/", "/agents/"+id+"/archive/"
		rows := []fileAttack{
			{"PUT through the planted link", "PUT", f + "link/pwned", []byte("x"), 403, "path_through_link", "pwned"},
			{"PUT through the link, parents made", "PUT", f + "link/d/pwned?parents=true", []byte("x"), 403, "path_through_link", "d"},
			{"mkdir through the link", "POST", f + "link/mk?op=mkdir", nil, 403, "path_through_link", "mk"},
			{"PUT ../", "PUT", f + "../outside/dotdot", []byte("x"), 422, "invalid_path", "dotdot"},
			{"PUT ../ encoded", "PUT", f + "..%2Foutside%2Fdotdot", []byte("x"), 422, "invalid_path", "dotdot"},
			{"archive through the link", "PUT", a + "", tarThrough, 403, "path_through_link", "pwned-tar"},
			{"archive with ../", "PUT", a + "", tarDotdot, 422, "invalid_archive", "pwned-tar2"},
			{"GET the token through the planted link", "GET", f + "toklink", nil, 403, "path_hidden", ""},
			{"GET the token", "GET", f + token, nil, 403, "path_hidden", ""},
			{"GET dshd's environment", "GET", f + "/proc/self/environ", nil, 403, "path_hidden", ""},
			{"GET dshd's environment by pid", "GET", f + fmt.Sprintf("/proc/%d/environ", s.cmd.Process.Pid), nil, 403, "path_hidden", ""},
			{"archive of the home", "GET", a + s.Home, nil, 403, "path_hidden", ""},
			{"PUT into the home", "PUT", f + s.Home + "/hooks.yaml", []byte("x"), 403, "path_hidden", ""},
			{"move out through the planted link", "POST", f + "link/victim?op=move&to=stolen", nil, 403, "path_through_link", ""},
			{"move in through the planted link", "POST", f + "mvsrc?op=move&to=link/pwned-mv", nil, 403, "path_through_link", "pwned-mv"},
			{"move ../", "POST", f + "mvsrc?op=move&to=../outside/dotdot-mv", nil, 422, "invalid_path", "dotdot-mv"},
			{"watch the home", "GET", f + s.Home + "?watch=true&recursive=true", nil, 403, "path_hidden", ""},
			{"watch a directory in the home", "GET", f + s.Home + "/sessions?watch=true", nil, 403, "path_hidden", ""},
			{"watch /proc", "GET", f + "/proc?watch=true&recursive=true", nil, 403, "path_hidden", ""},
			{"watch dshd's /proc", "GET", f + fmt.Sprintf("/proc/%d?watch=true", s.cmd.Process.Pid), nil, 403, "path_hidden", ""},
			{"watch the token through the planted link", "GET", f + "toklink?watch=true", nil, 403, "path_hidden", ""},
			{"move the token out", "POST", f + token + "?op=move&to=stolen-token", nil, 403, "path_hidden", ""},
			{"move into the home", "POST", f + "mvsrc?op=move&to=" + s.Home + "/hooks.yaml", nil, 403, "path_hidden", ""},
		}
		if id == confined {
			rows = append(rows,
				fileAttack{"PUT absolute outside the roots", "PUT", f + outside + "/abs", []byte("x"), 403, "path_not_writable", "abs"},
				fileAttack{"PUT /etc", "PUT", f + "/etc/dshd-adversarial", []byte("x"), 403, "path_not_writable", ""},
				fileAttack{"DELETE outside the roots", "DELETE", f + outside + "/victim", nil, 403, "path_not_writable", ""},
				fileAttack{"move into .git", "POST", f + "mvsrc?op=move&to=.git/hooks/pre-commit&parents=true", nil, 403, "path_protected", ""},
				fileAttack{"move out of the roots", "POST", f + "mvsrc?op=move&to=" + outside + "/abs-mv", nil, 403, "path_not_writable", "abs-mv"},
				fileAttack{"move in from outside the roots", "POST", f + outside + "/victim?op=move&to=stolen", nil, 403, "path_not_writable", ""},
			)
		}
		if id == free {
			// Unrestricted writes anywhere, but never take the home away.
			rows = append(rows,
				fileAttack{"move the home's parent", "POST", f + filepath.Dir(s.Home) + "?op=move&to=" + filepath.Dir(s.Home) + ".moved", nil, 403, "path_hidden", ""},
				fileAttack{"DELETE the home's parent", "DELETE", f + filepath.Dir(s.Home) + "?recursive=true", nil, 403, "path_hidden", ""},
			)
		}
		rows = append(rows, fileAttack{"DELETE through the link", "DELETE", f + "link/victim", nil, 403, "path_through_link", ""})
		for _, r := range rows {
			t.Run(who+"/"+r.name, func(t *testing.T) {
				st, code, b := s.fileReq(t, r.method, r.path, r.body)
				if st != r.status || code != r.code {
					t.Errorf("%s %s = %d %q, want %d %q: %s", r.method, r.path, st, code, r.status, r.code, b)
				}
				if bytes.Contains(b, []byte(s.Token)) {
					t.Errorf("the answer carries the token")
				}
				if r.gone != "" && exists(r.gone) {
					t.Errorf("%s appeared outside", r.gone)
				}
			})
		}
	}
	if !exists("victim") {
		t.Error("victim was removed or moved through the link")
	}
	if b, err := os.ReadFile(token); err != nil || !strings.Contains(string(b), s.Token) {
		t.Errorf("the token file after the rows: %v", err)
	}
	if got := bash(confined, "cat mvsrc; ls .git"); strings.TrimSpace(got) != "src" {
		t.Errorf("the confined agent's mvsrc and .git after the rows: %q", got)
	}
	if _, err := os.Lstat("/etc/dshd-adversarial"); err == nil {
		os.Remove("/etc/dshd-adversarial")
		t.Error("/etc/dshd-adversarial was written")
	}
}

// TestAdversarialFileTools: the model's file tools (read_file, write_file,
// edit_file, apply_patch) under hostile arguments, over the HTTP tools
// route and over /mcp, as a confined (workspace-write) and an unrestricted
// agent, each row beside a baseline that proves its path really leads
// where the attack wants (the model's own unconfined bash gets there, or
// the unrestricted agent's tool does where only the policy stops it).
// Every answer is a tool result (never a server error) that changes
// nothing outside and carries no token.
func TestAdversarialFileTools(t *testing.T) {
	t.Parallel()
	testenv.NeedRoot(t, "both mechanisms need root")
	mcp := startMCPClient(t)
	for _, mech := range sandboxMechanisms {
		t.Run(mech, func(t *testing.T) { testAdversarialFileTools(t, mcp, mech) })
	}
}

// toolAttack is one row: a tool call and what must not have happened.
type toolAttack struct {
	name, tool string
	args       map[string]any
	// harmed, when set, reports from the host's side that the attack
	// worked (a file appeared or changed outside).
	harmed func() bool
}

func testAdversarialFileTools(t *testing.T, mcp *mcpClient, mech string) {
	s := startSandboxServer(t, mech)
	base, err := os.MkdirTemp("/var/tmp", "dshd-adversarial-tools-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	outside := filepath.Join(base, "outside")
	token := filepath.Join(s.Home, "server.token")
	if err := os.MkdirAll(outside, 0o755); err != nil {
		t.Fatal(err)
	}
	exists := func(p string) bool { _, err := os.Lstat(p); return err == nil }
	out := func(name string) string { return filepath.Join(outside, name) }
	victim := func() string { b, _ := os.ReadFile(out("victim")); return string(b) }
	if err := os.WriteFile(out("victim"), []byte("v\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	type agentCase struct{ who, id, ws, session string }
	mk := func(who, pol string) agentCase {
		ws := filepath.Join(base, who)
		for _, d := range []string{ws, filepath.Join(ws, ".git", "hooks")} {
			if err := os.MkdirAll(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		id := s.newAgent(t, "/agents", map[string]any{"cwd": ws, "sandbox": map[string]any{"policy": pol}}).ID
		// The model plants its links and a file of its own with its bash.
		if r := s.callTool(t, id, "bash", map[string]any{"command": "ln -s " + outside + " link && ln -s " + token + " toklink && echo mine > mine.txt && echo planted"}); !strings.Contains(r.Text, "planted") {
			t.Fatalf("planting the links: %q", r.Text)
		}
		session := "advtools-" + mech + "-" + who
		mcp.connect(s, session, "?agentId="+id, nil)
		return agentCase{who, id, ws, session}
	}
	confined, free := mk("confined", "workspace-write"), mk("free", "unrestricted")
	bash := func(id, cmd string) string { return s.callTool(t, id, "bash", map[string]any{"command": cmd}).Text }

	// Baselines: the links and ../ lead out, the model's unconfined bash
	// gets there, and where only the policy stands in the way the
	// unrestricted agent's own tools get there too.
	bash(free.id, "echo x > link/pwned-bash; echo x > ../outside/dotdot-bash")
	if !exists(out("pwned-bash")) || !exists(out("dotdot-bash")) {
		t.Fatal("baseline: the unconfined bash did not write through the link and ../: the rows below prove nothing")
	}
	if got := bash(free.id, "cat toklink"); !strings.Contains(got, s.Token) {
		t.Fatalf("baseline: the planted link does not lead to the token (the unconfined bash read %q)", got)
	}
	if r := s.callTool(t, free.id, "write_file", map[string]any{"file_path": out("abs-free"), "content": "x"}); r.IsError || !exists(out("abs-free")) {
		t.Fatalf("baseline: write_file outside as the unrestricted agent = %+v", r)
	}
	if r := s.callTool(t, free.id, "write_file", map[string]any{"file_path": ".git/hooks/post-checkout", "content": "x"}); r.IsError {
		t.Fatalf("baseline: write_file into .git as the unrestricted agent = %+v", r)
	}

	patch := func(body string) map[string]any {
		return map[string]any{"input": "*** Begin Patch\n" + body + "*** End Patch\n"}
	}
	hookFile := filepath.Join(s.Home, "hooks", "claude-code.json")
	rows := []toolAttack{
		{"write_file through the planted link", "write_file", map[string]any{"file_path": "link/pwned", "content": "x"}, func() bool { return exists(out("pwned")) }},
		{"write_file ../", "write_file", map[string]any{"file_path": "../outside/dotdot", "content": "x"}, func() bool { return exists(out("dotdot")) }},
		{"edit_file through the planted link", "edit_file", map[string]any{"file_path": "link/victim", "old_string": "v", "new_string": "pwned"}, func() bool { return victim() != "v\n" }},
		{"apply_patch add through the link", "apply_patch", patch("*** Add File: link/pwned-patch\n+x\n"), func() bool { return exists(out("pwned-patch")) }},
		{"apply_patch add with ../", "apply_patch", patch("*** Add File: ../outside/dotdot-patch\n+x\n"), func() bool { return exists(out("dotdot-patch")) }},
		{"apply_patch delete through the link", "apply_patch", patch("*** Delete File: link/victim\n"), func() bool { return !exists(out("victim")) }},
		{"apply_patch update through the link", "apply_patch", patch("*** Update File: link/victim\n@@\n-v\n+pwned\n"), func() bool { return victim() != "v\n" }},
		{"apply_patch move through the link", "apply_patch", patch("*** Update File: mine.txt\n*** Move to: link/moved\n@@\n-mine\n+moved\n"), func() bool { return exists(out("moved")) }},
		{"write_file a hook into the home", "write_file", map[string]any{"file_path": hookFile, "content": "{}"}, func() bool { return exists(hookFile) }},
		{"apply_patch a hook into the home", "apply_patch", patch("*** Add File: " + hookFile + "\n+{}\n"), func() bool { return exists(hookFile) }},
		{"edit_file the token", "edit_file", map[string]any{"file_path": token, "old_string": s.Token[:8], "new_string": "x"}, nil},
		{"read_file the token through the planted link", "read_file", map[string]any{"file_path": "toklink"}, nil},
		{"read_file the token", "read_file", map[string]any{"file_path": token}, nil},
		{"read_file dshd's environment", "read_file", map[string]any{"file_path": "/proc/self/environ"}, nil},
		{"read_file dshd's environment by pid", "read_file", map[string]any{"file_path": fmt.Sprintf("/proc/%d/environ", s.cmd.Process.Pid)}, nil},
		{"read_file the home's sessions", "read_file", map[string]any{"file_path": filepath.Join(s.Home, "sessions")}, nil},
	}
	confinedRows := []toolAttack{
		{"write_file outside the roots", "write_file", map[string]any{"file_path": out("abs"), "content": "x"}, func() bool { return exists(out("abs")) }},
		{"write_file /etc", "write_file", map[string]any{"file_path": "/etc/dshd-adversarial-tools", "content": "x"}, func() bool { return exists("/etc/dshd-adversarial-tools") }},
		{"apply_patch delete outside the roots", "apply_patch", patch("*** Delete File: " + out("victim") + "\n"), func() bool { return !exists(out("victim")) }},
		{"write_file a git hook", "write_file", map[string]any{"file_path": ".git/hooks/pre-commit", "content": "x"}, func() bool { return exists(filepath.Join(confined.ws, ".git/hooks/pre-commit")) }},
		{"apply_patch a git hook", "apply_patch", patch("*** Add File: .git/hooks/pre-push\n+x\n"), func() bool { return exists(filepath.Join(confined.ws, ".git/hooks/pre-push")) }},
	}
	for _, a := range []agentCase{confined, free} {
		all := rows
		if a == confined {
			all = append(append([]toolAttack(nil), rows...), confinedRows...)
		}
		for _, r := range all {
			t.Run(a.who+"/"+r.name, func(t *testing.T) {
				for _, tr := range []string{"http", "mcp"} {
					var text string
					var isErr bool
					if tr == "http" {
						var res toolResult
						if st := s.DoJSON(t, "POST", "/agents/"+a.id+"/tools/"+r.tool, map[string]any{"arguments": r.args}, &res); st != http.StatusOK {
							t.Errorf("http: %s = %d, want 200 (a tool result, never a server error)", r.tool, st)
						}
						text, isErr = res.Text, res.IsError
					} else {
						res := mcp.call(a.session, r.tool, r.args)
						text, isErr = res.text(), res.Result.IsError
					}
					if !isErr {
						t.Errorf("%s: not an error result: %q", tr, text)
					}
					if strings.Contains(text, s.Token) {
						t.Errorf("%s: the answer carries the token", tr)
					}
					if r.harmed != nil && r.harmed() {
						t.Errorf("%s: the attack worked (%q)", tr, text)
					}
				}
			})
		}
	}
	if b, err := os.ReadFile(token); err != nil || !strings.Contains(string(b), s.Token) {
		t.Errorf("the token file changed: %q, %v", b, err)
	}
}

// TestAdversarialCheckpointDiff: the diff between two checkpoints reads
// files of the agent's layers and views (a unified diff with diff=true):
// a model that replaces a text file with a link to the token, so that the
// diff from its view back to an earlier one reads "the old file" through
// the link, gets no byte of the token; nor through a directory swapped for
// a link to the home. The baseline: the same link read by the model's own
// unrestricted bash does lead to the token.
func TestAdversarialCheckpointDiff(t *testing.T) {
	t.Parallel()
	testenv.NeedRoot(t, "overlayfs mounts and mount namespaces need CAP_SYS_ADMIN")
	repo := gitRepo(t)
	s := startServer(t)
	needSnapshots(t, s)
	token := filepath.Join(s.Home, "server.token")
	secret, err := os.ReadFile(token)
	if err != nil {
		t.Fatal(err)
	}
	a := s.newAgent(t, "/agents", map[string]any{"cwd": repo, "workspace": "snapshot"})
	s.toolCall(t, a.ID, "c_1", "echo text > f.txt && mkdir -p d && echo inner > d/x.txt")
	s.toolCall(t, a.ID, "c_2", "rm f.txt && ln -s "+token+" f.txt && rm -r d && ln -s "+s.Home+" d")
	// Baseline: the link leads to the token.
	if out := s.toolCall(t, a.ID, "m_1", "cat f.txt; cat d/server.token"); !strings.Contains(out, strings.TrimSpace(string(secret))) {
		t.Fatalf("baseline: the planted links do not lead to the token (%q): the rows below prove nothing", out)
	}
	for _, q := range []string{"from=c_2&to=c_1&diff=true", "from=c_1&to=c_2&diff=true", "to=c_2&diff=true"} {
		var res struct {
			Changes []wsChange `json:"changes"`
		}
		resp := s.Do(t, "GET", "/agents/"+a.ID+"/checkpoints/diff?"+q, nil)
		body, _ := readAllString(resp)
		if resp.StatusCode != 200 || json.Unmarshal([]byte(body), &res) != nil {
			t.Fatalf("diff %s = %d %s", q, resp.StatusCode, body)
		}
		if strings.Contains(body, strings.TrimSpace(string(secret))) {
			t.Errorf("diff %s carries the token: %s", q, body)
		}
		if len(res.Changes) == 0 {
			t.Errorf("diff %s lists nothing", q)
		}
	}
	// The route's answers: the two views, either way round; the bad ones.
	var res struct {
		From    string     `json:"from"`
		Changes []wsChange `json:"changes"`
	}
	if st := s.DoJSON(t, "GET", "/agents/"+a.ID+"/checkpoints/diff?from=c_1&to=c_2", nil, &res); st != 200 || res.From != "c_1" || strings.Join(changeList(res.Changes), ",") != "modified d,modified f.txt" {
		t.Errorf("diff c_1 to c_2 = %d %+v", st, res)
	}
	var p wsProblem
	if st := s.DoJSON(t, "GET", "/agents/"+a.ID+"/checkpoints/diff?from=nope", nil, &p); st != 404 || p.Code != "checkpoint_not_found" {
		t.Errorf("diff from an unknown call = %d %+v", st, p)
	}
}
