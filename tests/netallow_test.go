package tests

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http/httptest"
	"os"
	osexec "os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/dshd/dshd/internal/netallow/netallowtest"
	"github.com/dshd/dshd/internal/testenv"
)

type netHostCount struct {
	Host   string `json:"host"`
	Count  int    `json:"count"`
	Reason string `json:"reason"`
}

type netRecord struct {
	Reached []netHostCount `json:"reached"`
	Refused []netHostCount `json:"refused"`
}

type allowPolicy struct {
	Policy  string   `json:"policy"`
	Network string   `json:"network"`
	Allow   []string `json:"allow"`
}

type netJob struct {
	ID       string       `json:"id"`
	State    string       `json:"state"`
	ExitCode *int         `json:"exitCode"`
	Stdout   output       `json:"stdout"`
	Stderr   output       `json:"stderr"`
	Sandbox  *allowPolicy `json:"sandbox"`
	Network  *netRecord   `json:"network"`
}

// counts renders hs as host=count, sorted.
func counts(hs []netHostCount) []string {
	var out []string
	for _, h := range hs {
		out = append(out, fmt.Sprintf("%s=%d", h.Host, h.Count))
	}
	slices.Sort(out)
	return out
}

// TestNetworkAllowlist drives the allowlist through the real server under
// each mechanism: test names pinned by the operator (sandbox.proxyHosts) to
// loopback servers, one plain HTTP and one TLS with a CA of its own. An
// allowed name is reached over HTTP and over TLS; a name not listed, a raw
// address, a name the normal resolver maps to loopback (localhost), a
// direct connection and a UDP send are not; the job record lists both
// kinds, for foreground, background and terminal jobs; a child cannot
// widen the list (422); a model's argument naming hosts is ignored and
// recorded, and the transcript's tool/result carries the record; /metrics
// counts the decisions.
func TestNetworkAllowlist(t *testing.T) {
	t.Parallel()
	if _, err := osexec.LookPath("curl"); err != nil {
		testenv.Need(t, "curl: %v", err)
	}
	for _, mech := range sandboxMechanisms {
		t.Run(mech, func(t *testing.T) {
			t.Parallel()
			testenv.SkipMechanism(t, mech)
			testNetworkAllowlist(t, mech)
		})
	}
}

func testNetworkAllowlist(t *testing.T, mech string) {
	web := httptest.NewServer(netallowtest.Hello)
	defer web.Close()
	tlsSrv, ca := netallowtest.TLSServer(t, netallowtest.Hello, "secure.test")
	s := startServer(t, withConfig(fmt.Sprintf("sandbox:\n  mechanism: %s\n  proxyHosts:\n    web.test: 127.0.0.1\n    secure.test: 127.0.0.1\n    other.test: 127.0.0.1\n", mech)))
	needSandbox(t, s)
	var h healthSandbox
	s.DoJSON(t, "GET", "/healthz", nil, &h)
	if !slices.Contains(h.Details.Sandbox.Networks, "allowlist") {
		t.Fatalf("/healthz networks %v lack allowlist: %s", h.Details.Sandbox.Networks, h.Details.Sandbox.Reason)
	}
	ws := t.TempDir()
	caFile := filepath.Join(ws, "ca.pem")
	if err := os.WriteFile(caFile, ca, 0o644); err != nil {
		t.Fatal(err)
	}
	wp, tp := netallowtest.Port(web), netallowtest.Port(tlsSrv)

	var a struct {
		ID      string       `json:"id"`
		Sandbox *allowPolicy `json:"sandbox"`
	}
	body := map[string]any{"cwd": ws, "sandbox": map[string]any{"policy": "workspace-write", "network": "allowlist", "allow": []string{"WEB.test", "secure.test", "localhost", "*.wide.test"}}}
	if st := s.DoJSON(t, "POST", "/agents", body, &a); st != 201 {
		t.Fatalf("POST /agents = %d", st)
	}
	if a.Sandbox == nil || a.Sandbox.Network != "allowlist" || !slices.Equal(a.Sandbox.Allow, []string{"*.wide.test", "localhost", "secure.test", "web.test"}) {
		t.Fatalf("agent sandbox = %+v, want the allowlist in canonical form", a.Sandbox)
	}

	script := fmt.Sprintf(`curl -sS --max-time 5 http://web.test:%[1]d/; echo " http=$?"
curl -sS --max-time 5 --cacert %[2]s https://secure.test:%[3]d/; echo " https=$?"
curl -sS --max-time 5 http://other.test:%[1]d/ | tr -d '\n'; echo " other"
curl -sS --max-time 5 https://other.test:%[3]d/ 2>&1 | tr -d '\n'; echo " other-tls"
curl -sS --max-time 5 --noproxy '' http://127.0.0.1:%[1]d/ | tr -d '\n'; echo " rawip"
curl -sS --max-time 5 http://169.254.169.254/latest/meta-data/ | tr -d '\n'; echo " metadata"
curl -sS --max-time 5 --noproxy '' http://localhost:%[1]d/ | tr -d '\n'; echo " localhost"
curl -s --max-time 5 --noproxy '*' http://127.0.0.1:%[1]d/; echo " direct=$?"
(echo x >/dev/udp/1.1.1.1/53) 2>/dev/null; echo " udp=$?"
`, wp, caFile, tp)
	wantOut := []string{
		fmt.Sprintf("hello web.test:%d http=0", wp),
		fmt.Sprintf("hello secure.test:%d https=0", tp),
		fmt.Sprintf("other.test:%d: not on the network allowlist other", wp),
		"403 other-tls",
		"a raw address is reached only when the allowlist names it rawip",
		"169.254.169.254:80: a raw address is reached only when the allowlist names it metadata",
		"resolves to 127.0.0.1, a loopback address the allowlist does not name localhost",
		" direct=7", " udp=1",
	}
	wantReached := []string{fmt.Sprintf("secure.test:%d=1", tp), fmt.Sprintf("web.test:%d=1", wp)}
	wantRefused := []string{fmt.Sprintf("127.0.0.1:%d=1", wp), "169.254.169.254:80=1", fmt.Sprintf("localhost:%d=1", wp), fmt.Sprintf("other.test:%d=1", tp), fmt.Sprintf("other.test:%d=1", wp)}
	slices.Sort(wantReached)
	slices.Sort(wantRefused)
	check := func(what string, j netJob, out string) {
		t.Helper()
		for _, w := range wantOut {
			if !strings.Contains(out, w) {
				t.Errorf("%s: output lacks %q:\n%s", what, w, out)
			}
		}
		if j.Network == nil {
			t.Fatalf("%s: job %s has no network record", what, j.ID)
		}
		if got := counts(j.Network.Reached); !slices.Equal(got, wantReached) {
			t.Errorf("%s: reached %v, want %v", what, got, wantReached)
		}
		if got := counts(j.Network.Refused); !slices.Equal(got, wantRefused) {
			t.Errorf("%s: refused %v, want %v", what, got, wantRefused)
		}
		for _, r := range j.Network.Refused {
			if r.Reason == "" {
				t.Errorf("%s: refused %s without a reason", what, r.Host)
			}
		}
	}

	t.Run("foreground", func(t *testing.T) {
		var j netJob
		if st := s.DoJSON(t, "POST", "/exec", map[string]any{"command": script, "agentId": a.ID}, &j); st != 200 {
			t.Fatalf("POST /exec = %d", st)
		}
		check("foreground", j, j.Stdout.Text)
		// The variables are set for the command; nothing else leads out.
		var env netJob
		s.DoJSON(t, "POST", "/exec", map[string]any{"command": "echo $HTTPS_PROXY $https_proxy $NO_PROXY", "agentId": a.ID}, &env)
		if strings.TrimSpace(env.Stdout.Text) != "http://127.0.0.1:3128 http://127.0.0.1:3128 localhost,127.0.0.1,::1" {
			t.Errorf("proxy variables = %q", env.Stdout.Text)
		}
	})
	t.Run("background", func(t *testing.T) {
		var started netJob
		if st := s.DoJSON(t, "POST", "/exec", map[string]any{"command": script, "agentId": a.ID, "background": true}, &started); st != 202 {
			t.Fatalf("POST /exec background = %d", st)
		}
		s.waitJob(t, started.ID)
		var j netJob
		s.DoJSON(t, "GET", "/jobs/"+started.ID, nil, &j)
		check("background", j, j.Stdout.Text)
	})
	t.Run("tty", func(t *testing.T) {
		var started netJob
		if st := s.DoJSON(t, "POST", "/exec", map[string]any{"command": script + "echo done-tty", "agentId": a.ID, "background": true, "tty": true}, &started); st != 202 {
			t.Fatalf("POST /exec tty = %d", st)
		}
		s.waitJob(t, started.ID)
		var j netJob
		s.DoJSON(t, "GET", "/jobs/"+started.ID, nil, &j)
		check("tty", j, strings.ReplaceAll(string(s.rawOutput(t, started.ID)), "\r\n", "\n"))
	})

	t.Run("lineage", func(t *testing.T) {
		for _, tc := range []struct {
			path string
			body map[string]any
		}{
			{"/agents/" + a.ID + "/spawn", map[string]any{"sandbox": map[string]any{"network": "allowlist", "allow": []string{"web.test", "evil.test"}}}},
			{"/agents/" + a.ID + "/fork", map[string]any{"sandbox": map[string]any{"network": "allowlist", "allow": []string{"*.secure.test"}}}},
			{"/agents/" + a.ID + "/spawn", map[string]any{"sandbox": map[string]any{"network": "on"}}},
			{"/exec", map[string]any{"command": "true", "agentId": a.ID, "sandbox": map[string]any{"network": "allowlist", "allow": []string{"other.test"}}}},
		} {
			var p problemCode
			if st := s.DoJSON(t, "POST", tc.path, tc.body, &p); st != 422 || p.Code != "sandbox_looser" {
				t.Errorf("POST %s %v = %d %+v, want 422 sandbox_looser", tc.path, tc.body, st, p)
			}
		}
		for _, bad := range []map[string]any{
			{"network": "off", "allow": []string{"web.test"}},
			{"network": "allowlist", "allow": []string{"http://web.test/"}},
			{"network": "allowlist", "allow": []string{"*.test"}},
			{"network": "allowlist", "allow": []string{"web.test", "127.0.0.1:8080"}},
		} {
			var p problemCode
			if st := s.DoJSON(t, "POST", "/agents/"+a.ID+"/spawn", map[string]any{"sandbox": bad}, &p); st != 422 || p.Code != "invalid_sandbox" {
				t.Errorf("spawn with %v = %d %+v, want 422 invalid_sandbox", bad, st, p)
			}
		}
		var child struct {
			ID      string       `json:"id"`
			Sandbox *allowPolicy `json:"sandbox"`
		}
		if st := s.DoJSON(t, "POST", "/agents/"+a.ID+"/spawn", map[string]any{"sandbox": map[string]any{"network": "allowlist", "allow": []string{"a.wide.test:443", "web.test"}}}, &child); st != 201 {
			t.Fatalf("spawn narrower = %d", st)
		}
		if child.Sandbox == nil || !slices.Equal(child.Sandbox.Allow, []string{"a.wide.test:443", "web.test"}) {
			t.Errorf("child sandbox = %+v", child.Sandbox)
		}
		// A loopback address in an allowlist would be the command's own
		// loopback, which curl reaches directly (NO_PROXY): refused,
		// pointing at the operator's pinned names, for a root agent and an
		// execution too.
		for _, tc := range []struct {
			path string
			body map[string]any
		}{
			{"/agents", map[string]any{"cwd": ws, "sandbox": map[string]any{"policy": "workspace-write", "network": "allowlist", "allow": []string{"[::1]:443"}}}},
			{"/exec", map[string]any{"command": "true", "sandbox": map[string]any{"policy": "workspace-write", "network": "allowlist", "allow": []string{"127.0.0.1"}}}},
			{"/exec", map[string]any{"command": "true", "agentId": a.ID, "sandbox": map[string]any{"allow": []string{"127.0.0.1:" + fmt.Sprint(wp)}}}},
		} {
			var p problemCode
			if st := s.DoJSON(t, "POST", tc.path, tc.body, &p); st != 422 || p.Code != "invalid_sandbox" || !strings.Contains(p.Detail, "sandbox.proxyHosts") {
				t.Errorf("POST %s %v = %d %+v, want 422 invalid_sandbox pointing at sandbox.proxyHosts", tc.path, tc.body, st, p)
			}
		}
		// A field left out is the parent's (then the server's): only
		// network allowlist keeps the parent's hosts; only allow keeps
		// the parent's network and file policy; and the merged policy is
		// what is judged.
		for _, tc := range []struct {
			path string
			body map[string]any
			want []string
		}{
			{"/agents/" + a.ID + "/fork", map[string]any{"sandbox": map[string]any{"network": "allowlist"}}, a.Sandbox.Allow},
			{"/agents/" + a.ID + "/spawn", map[string]any{"sandbox": map[string]any{"network": "allowlist"}}, a.Sandbox.Allow},
			{"/agents/" + a.ID + "/spawn", map[string]any{"sandbox": map[string]any{"allow": []string{"web.test"}}}, []string{"web.test"}},
			{"/agents/" + a.ID + "/fork", map[string]any{"sandbox": map[string]any{"policy": "read-only"}}, a.Sandbox.Allow},
		} {
			var c struct {
				Sandbox *allowPolicy `json:"sandbox"`
			}
			if st := s.DoJSON(t, "POST", tc.path, tc.body, &c); st != 201 {
				t.Errorf("POST %s %v = %d, want 201 (the rest taken from the parent)", tc.path, tc.body, st)
				continue
			}
			wantPolicy := "workspace-write"
			if sb := tc.body["sandbox"].(map[string]any); sb["policy"] != nil {
				wantPolicy = sb["policy"].(string)
			}
			if c.Sandbox == nil || c.Sandbox.Policy != wantPolicy || c.Sandbox.Network != "allowlist" || !slices.Equal(c.Sandbox.Allow, tc.want) {
				t.Errorf("POST %s %v: sandbox %+v, want %s, allowlist %v", tc.path, tc.body, c.Sandbox, wantPolicy, tc.want)
			}
		}
		var only netJob
		if st := s.DoJSON(t, "POST", "/exec", map[string]any{"command": "true", "agentId": a.ID, "sandbox": map[string]any{"allow": []string{"web.test"}}}, &only); st != 200 {
			t.Errorf("POST /exec with only allow = %d, want 200 under the agent's network", st)
		} else if only.Sandbox == nil || only.Sandbox.Network != "allowlist" || only.Sandbox.Policy != "workspace-write" || !slices.Equal(only.Sandbox.Allow, []string{"web.test"}) {
			t.Errorf("POST /exec with only allow: sandbox %+v", only.Sandbox)
		}
		// Under the server's default (network on), allow alone is still
		// an allowlist without its network.
		var p problemCode
		if st := s.DoJSON(t, "POST", "/exec", map[string]any{"command": "true", "sandbox": map[string]any{"allow": []string{"web.test"}}}, &p); st != 422 || p.Code != "invalid_sandbox" {
			t.Errorf("POST /exec without agent, only allow = %d %+v, want 422 invalid_sandbox", st, p)
		}
		// The narrower child is refused what its parent may reach.
		var j netJob
		s.DoJSON(t, "POST", "/exec", map[string]any{"command": fmt.Sprintf("curl -sS --max-time 5 --cacert %s https://secure.test:%d/", caFile, tp), "agentId": child.ID}, &j)
		if j.Network == nil || len(j.Network.Reached) != 0 || len(j.Network.Refused) != 1 {
			t.Errorf("child's job network = %+v, want secure.test refused", j.Network)
		}
	})

	t.Run("model", func(t *testing.T) {
		r := s.callTool(t, a.ID, "bash", map[string]any{
			"command": fmt.Sprintf("curl -sS --max-time 5 http://other.test:%d/", wp),
			"network": map[string]any{"allow": []string{"other.test"}},
			"allow":   []string{"other.test"},
		})
		if !strings.Contains(r.Text, "not on the network allowlist") {
			t.Errorf("bash result %q, want the refusal", r.Text)
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
		var rec *netRecord
		for _, e := range tr.Events {
			switch e.Type {
			case "tool/call":
				var d struct{ Ignored []string }
				_ = json.Unmarshal(e.Data, &d)
				ignored = d.Ignored
			case "tool/result":
				var d struct{ Network *netRecord }
				_ = json.Unmarshal(e.Data, &d)
				rec = d.Network
			}
		}
		if !slices.Contains(ignored, "network") || !slices.Contains(ignored, "allow") {
			t.Errorf("tool/call ignored = %v, want network and allow", ignored)
		}
		if rec == nil || len(rec.Reached) != 0 || !slices.Equal(counts(rec.Refused), []string{fmt.Sprintf("other.test:%d=1", wp)}) {
			t.Errorf("tool/result network = %+v, want other.test refused once", rec)
		}
	})

	t.Run("metrics", func(t *testing.T) {
		if got := s.metric(t, `dshd_network_proxy_connections_total{decision="reached"}`); got < 6 {
			t.Errorf("reached = %v, want at least 6 (two per job of the script)", got)
		}
		if got := s.metric(t, `dshd_network_proxy_refused_total{reason="not_listed"}`); got < 7 {
			t.Errorf("refused not_listed = %v, want at least 7", got)
		}
		if got := s.metric(t, `dshd_network_proxy_refused_total{reason="restricted_address"}`); got < 3 {
			t.Errorf("refused restricted_address = %v, want at least 3", got)
		}
	})
}

// TestNetworkAllowlistConfig: a default allowlist that cannot be right,
// and a pinned name or address that is not one, stop the server at start.
func TestNetworkAllowlistConfig(t *testing.T) {
	t.Parallel()
	for yaml, want := range map[string]string{
		"sandbox:\n  network: allowlist\n":                                "network allowlist needs allow",
		"sandbox:\n  network: \"off\"\n  allow: [a.example.com]\n":        "allow is given only with network allowlist",
		"sandbox:\n  network: allowlist\n  allow: [\"*.com\"]\n":          "a wildcard must name a domain",
		"sandbox:\n  network: allowlist\n  allow: [\"127.0.0.1:8080\"]\n": "127.0.0.1:8080 names a loopback or unspecified address",
		"sandbox:\n  proxyHosts:\n    web.test: not-an-address\n":         `web.test: "not-an-address" is not an address`,
		"sandbox:\n  proxyHosts:\n    \"*.web.test\": 127.0.0.1\n":        `"*.web.test" is not a host name`,
	} {
		out := refuseToStart(t, filepath.Join(t.TempDir(), "home"), "--config", writeConfig(t, yaml))
		if !strings.Contains(out, want) {
			t.Errorf("config %q: output lacks %q:\n%s", yaml, want, out)
		}
	}
}

// TestNetworkAllowlistFlood: a job floods the proxy at 127.0.0.1:3128
// with "CONNECT " and 256 MiB without a newline, then opens 100
// connections whose heads are just under the bound (60,000 bytes) and
// keeps them open as tunnels. The flood is answered 431 and cut off; 64
// tunnels are opened and 36 connections answered 503; and dshd's own
// memory (its real RSS, read from /proc) peaks within a few MiB of what
// it was before. Without the bound the proxy buffered the whole line:
// dshd grew by gigabytes for the job's 256 MiB.
func TestNetworkAllowlistFlood(t *testing.T) {
	t.Parallel()
	if _, err := osexec.LookPath("python3"); err != nil {
		testenv.Need(t, "python3: %v", err)
	}
	for _, mech := range sandboxMechanisms {
		t.Run(mech, func(t *testing.T) {
			t.Parallel()
			testenv.SkipMechanism(t, mech)
			testNetworkAllowlistFlood(t, mech)
		})
	}
}

func testNetworkAllowlistFlood(t *testing.T, mech string) {
	// web.test holds every tunnel open, reading and dropping what it gets.
	hold, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer hold.Close()
	go func() {
		for {
			c, err := hold.Accept()
			if err != nil {
				return
			}
			go func() { io.Copy(io.Discard, c); c.Close() }()
		}
	}()
	port := hold.Addr().(*net.TCPAddr).Port
	s := startServer(t, withConfig(fmt.Sprintf("sandbox:\n  mechanism: %s\n  proxyHosts:\n    web.test: 127.0.0.1\n", mech)))
	needSandbox(t, s)
	var a struct {
		ID string `json:"id"`
	}
	body := map[string]any{"cwd": t.TempDir(), "sandbox": map[string]any{"policy": "workspace-write", "network": "allowlist", "allow": []string{"web.test"}}}
	if st := s.DoJSON(t, "POST", "/agents", body, &a); st != 201 {
		t.Fatalf("POST /agents = %d", st)
	}
	run := func(command string) netJob {
		t.Helper()
		var j netJob
		if st := s.DoJSON(t, "POST", "/exec", map[string]any{"command": command, "agentId": a.ID, "timeoutMs": 300000}, &j); st != 200 || j.State != "exited" {
			t.Fatalf("POST /exec = %d, job %+v", st, j)
		}
		return j
	}
	// One job through the proxy first, so that the baseline is a server
	// that has served one.
	run(fmt.Sprintf("exec 3<>/dev/tcp/127.0.0.1/3128 && printf 'CONNECT web.test:%d HTTP/1.1\\r\\n\\r\\n' >&3 && head -1 <&3", port))
	pid := s.cmd.Process.Pid
	rssBefore, peakBefore := rssKiB(t, pid, "VmRSS"), rssKiB(t, pid, "VmHWM")

	const flood = 256 << 20
	j := run(fmt.Sprintf(`exec 3<>/dev/tcp/127.0.0.1/3128
{ printf 'CONNECT '; head -c %d /dev/zero | tr '\0' a; } >&3 2>/dev/null
echo "flood=$?"
head -1 <&3`, flood))
	if !strings.Contains(j.Stdout.Text, "431 Request Header Fields Too Large") || strings.Contains(j.Stdout.Text, "flood=0") {
		t.Errorf("flood job: %q, want the writes cut off and a 431", j.Stdout.Text)
	}
	rssFlood, peakFlood := rssKiB(t, pid, "VmRSS"), rssKiB(t, pid, "VmHWM")

	j = run(fmt.Sprintf(`python3 - <<'PY'
import socket
head = b"CONNECT web.test:%d HTTP/1.1\r\nHost: web.test\r\nX-Pad: " + b"a" * 60000 + b"\r\n\r\n"
socks = []
for i in range(100):
    s = socket.create_connection(("127.0.0.1", 3128))
    s.sendall(head)
    socks.append(s)
answers = {}
for s in socks:
    line = s.makefile("rb").readline().split(b" ")[1].decode()
    answers[line] = answers.get(line, 0) + 1
print(" ".join("%%s=%%d" %% kv for kv in sorted(answers.items())))
PY`, port))
	if got := strings.TrimSpace(j.Stdout.Text); got != "200=64 503=36" {
		t.Errorf("100 connections at once: answers %q (stderr %q), want 200=64 503=36", got, j.Stderr.Text)
	}
	if j.Network == nil || !slices.Contains(counts(j.Network.Refused), "(too many connections)=36") {
		t.Errorf("connections job's record %+v, want 36 refused as too many", j.Network)
	}
	rssAfter, peakAfter := rssKiB(t, pid, "VmRSS"), rssKiB(t, pid, "VmHWM")

	t.Logf("dshd (%s): RSS before %d KiB (peak %d); after a %d MiB flood %d KiB (peak %d); after 64 tunnels with 60 KB heads %d KiB (peak %d)",
		mech, rssBefore, peakBefore, flood>>20, rssFlood, peakFlood, rssAfter, peakAfter)
	// The flood: a few MiB at most (one head of 64 KiB, its reader's
	// growth, the garbage collector's slack, the race detector's).
	if grew := peakFlood - rssBefore; grew > 8<<10 {
		t.Errorf("dshd's peak RSS grew %d KiB during the flood over its RSS before (%d KiB), want at most 8 MiB", grew, rssBefore)
	}
	// 64 connections at once: each holds its head, its reader and its
	// goroutines (each of which the race detector gives state of its own:
	// about 30 MiB in all under it, 3-5 MiB without); bounded by the
	// number of connections.
	if grew := peakAfter - rssBefore; grew > 64<<10 {
		t.Errorf("dshd's peak RSS grew %d KiB with 64 tunnels open over its RSS before (%d KiB), want at most 64 MiB", grew, rssBefore)
	}
}
