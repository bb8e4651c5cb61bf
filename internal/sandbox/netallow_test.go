package sandbox

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"net/netip"
	"os"
	osexec "os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dshd/dshd/internal/netallow"
	"github.com/dshd/dshd/internal/netallow/netallowtest"
	"github.com/dshd/dshd/internal/testenv"
)

func TestAllowlistPolicyRules(t *testing.T) {
	t.Parallel()
	al := func(e ...string) Policy {
		return Policy{FS: WorkspaceWrite, Network: NetworkAllowlist, Allow: MustHosts(e...)}
	}
	outer := al("*.example.org", "api.example.com")
	for _, c := range []struct {
		p    Policy
		want bool
	}{
		{al("a.example.org"), true},
		{al("api.example.com:443", "*.b.example.org"), true},
		{al("evil.com"), false},
		{al("api.example.com", "evil.com"), false},
		{Policy{FS: WorkspaceWrite, Network: NetworkOff}, true},
		{Policy{FS: WorkspaceWrite, Network: NetworkOn}, false},
		{Policy{FS: Unrestricted, Network: NetworkAllowlist, Allow: MustHosts("a.example.org")}, false},
	} {
		if got := c.p.Within(outer); got != c.want {
			t.Errorf("%v within %v = %v, want %v", c.p, outer, got, c.want)
		}
	}
	if !al("x.com").Within(Policy{FS: WorkspaceWrite, Network: NetworkOn}) || al("x.com").Within(Policy{FS: WorkspaceWrite, Network: NetworkOff}) {
		t.Error("the allowlist ranks between on and off")
	}
	if !al("x.com").Confined() || !(Policy{FS: Unrestricted, Network: NetworkAllowlist, Allow: MustHosts("x.com")}).Confined() {
		t.Error("the allowlist needs a sandbox")
	}
	// In effect, an allowlist has its entries and entries go with an
	// allowlist; given in part, only what is given is judged.
	for _, c := range []struct {
		p                Policy
		partialOK, effOK bool
	}{
		{Policy{FS: ReadOnly, Network: NetworkAllowlist}, true, false},
		{Policy{FS: ReadOnly, Network: NetworkOn, Allow: MustHosts("x.com")}, false, false},
		{Policy{FS: ReadOnly, Network: NetworkOff, Allow: MustHosts("x.com")}, false, false},
		{Policy{FS: ReadOnly, Allow: MustHosts("x.com")}, true, false},
		{Policy{Network: NetworkAllowlist, Allow: MustHosts("x.com")}, true, false},
		{Policy{FS: ReadOnly, Network: NetworkAllowlist, Allow: MustHosts("x.com")}, true, true},
		{Policy{FS: ReadOnly, Network: NetworkAllowlist, Allow: HostsOf([]string{"*"})}, false, false},
		// An address that inside the sandbox is the command's own.
		{Policy{FS: ReadOnly, Network: NetworkAllowlist, Allow: MustHosts("127.0.0.1:8080")}, true, false},
		{Policy{FS: ReadOnly, Network: NetworkAllowlist, Allow: MustHosts("x.com", "127.0.0.2")}, true, false},
		{Policy{FS: ReadOnly, Network: NetworkAllowlist, Allow: MustHosts("[::1]:443")}, true, false},
		{Policy{FS: ReadOnly, Network: NetworkAllowlist, Allow: MustHosts("::ffff:127.0.0.1")}, true, false},
		{Policy{FS: ReadOnly, Network: NetworkAllowlist, Allow: MustHosts("0.0.0.0:80")}, true, false},
		{Policy{FS: ReadOnly, Network: NetworkAllowlist, Allow: MustHosts("[::]")}, true, false},
		{Policy{FS: ReadOnly, Network: NetworkAllowlist, Allow: MustHosts("10.0.0.5:5432", "localhost")}, true, true},
	} {
		if err := c.p.Validate(); (err == nil) != c.partialOK {
			t.Errorf("Validate(%v) = %v, want ok %v", c.p, err, c.partialOK)
		}
		if err := c.p.ValidateEffective(); (err == nil) != c.effOK {
			t.Errorf("ValidateEffective(%v) = %v, want ok %v", c.p, err, c.effOK)
		}
	}
	if err := (Policy{FS: ReadOnly, Network: NetworkAllowlist, Allow: MustHosts("x.com", "127.0.0.1:8080")}).ValidateEffective(); err == nil ||
		!strings.Contains(err.Error(), "127.0.0.1:8080") || !strings.Contains(err.Error(), "sandbox.proxyHosts") || strings.Contains(err.Error(), "x.com") {
		t.Errorf("a loopback entry: %v, want it named and sandbox.proxyHosts pointed at", err)
	}
	if _, err := NewHosts([]string{"http://x.com"}); err == nil {
		t.Error("NewHosts took a URL")
	}
	// A field left out is the enclosing policy's: an execution that names
	// no network takes its agent's, allowlist and all; one that gives only
	// allow keeps the agent's allowlist network; one that gives only
	// network allowlist keeps the agent's hosts; a network other than
	// allowlist takes no hosts. Each is then valid in effect or not.
	on := Policy{FS: Unrestricted, Network: NetworkOn}
	narrow := MustHosts("a.example.org")
	for _, c := range []struct {
		req, outer, want Policy
		valid            bool
	}{
		{Policy{FS: ReadOnly}, outer, Policy{FS: ReadOnly, Network: NetworkAllowlist, Allow: outer.Allow}, true},
		{Policy{Allow: narrow}, outer, Policy{FS: WorkspaceWrite, Network: NetworkAllowlist, Allow: narrow}, true},
		{Policy{Network: NetworkAllowlist}, outer, outer, true},
		{Policy{Network: NetworkOff}, outer, Policy{FS: WorkspaceWrite, Network: NetworkOff}, true},
		{Policy{Network: NetworkOn}, outer, Policy{FS: WorkspaceWrite, Network: NetworkOn}, true},
		{Policy{Allow: narrow}, on, Policy{FS: Unrestricted, Network: NetworkOn, Allow: narrow}, false},
		{Policy{Network: NetworkAllowlist}, on, Policy{FS: Unrestricted, Network: NetworkAllowlist}, false},
		{Policy{}, on, on, true},
	} {
		got := c.req.Or(c.outer)
		if got != c.want {
			t.Errorf("%+v.Or(%v) = %v, want %v", c.req, c.outer, got, c.want)
		}
		if err := got.ValidateEffective(); (err == nil) != c.valid {
			t.Errorf("%+v.Or(%v) = %v: ValidateEffective %v, want valid %v", c.req, c.outer, got, err, c.valid)
		}
	}
	// Stored with an agent and read back, the list is the same.
	b, err := json.Marshal(outer)
	if err != nil || string(b) != `{"policy":"workspace-write","network":"allowlist","allow":["*.example.org","api.example.com"]}` {
		t.Errorf("json %s, %v", b, err)
	}
	var back Policy
	if err := json.Unmarshal(b, &back); err != nil || back != outer {
		t.Errorf("read back %+v, %v; want %+v", back, err, outer)
	}
	if b, _ := json.Marshal(Policy{FS: ReadOnly, Network: NetworkOff}); strings.Contains(string(b), "allow") {
		t.Errorf("json %s names an allowlist", b)
	}
	if err := json.Unmarshal([]byte(`{"network":"allowlist","allow":["*"]}`), &back); err == nil {
		t.Error("an invalid stored list was read")
	}
	if s := al("b.com", "a.com").Sentence(); !strings.HasSuffix(s, "; network allowlist.") {
		t.Errorf("sentence %q does not name the allowlist", s)
	}
}

// TestAllowlist runs curl and bash under the allowlist with each
// mechanism: a listed name is reached over HTTP and over TLS; a name not
// listed, a raw address, a direct connection, a UDP send and a name that
// resolves to a restricted address are not; the session records both.
func TestAllowlist(t *testing.T) {
	t.Parallel()
	needRoot(t)
	if _, err := osexec.LookPath("curl"); err != nil {
		testenv.Need(t, "curl: %v", err)
	}
	web := httptest.NewServer(netallowtest.Hello)
	defer web.Close()
	tlsSrv, ca := netallowtest.TLSServer(t, netallowtest.Hello, "secure.test")
	lo := []netip.Addr{netip.MustParseAddr("127.0.0.1")}
	for _, mech := range []Mechanism{MechanismNamespaces, MechanismBubblewrap} {
		t.Run(string(mech), func(t *testing.T) {
			testenv.SkipMechanism(t, string(mech))
			ws := t.TempDir()
			caFile := filepath.Join(ws, "ca.pem")
			if err := os.WriteFile(caFile, ca, 0o644); err != nil {
				t.Fatal(err)
			}
			px, err := netallow.New(netallow.Config{Hosts: map[string][]netip.Addr{"web.test": lo, "secure.test": lo, "other.test": lo}})
			if err != nil {
				t.Fatal(err)
			}
			h := NewHost(context.Background(), Config{Mechanism: mech, Proxy: px})
			if err := h.Check(Policy{FS: WorkspaceWrite, Network: NetworkAllowlist, Allow: MustHosts("web.test")}); err != nil {
				t.Fatal(err)
			}
			wp, tp := netallowtest.Port(web), netallowtest.Port(tlsSrv)
			script := fmt.Sprintf(`
export http_proxy=%[1]s https_proxy=%[1]s
curl -sS --max-time 5 http://web.test:%[2]d/; echo " http=$?"
curl -sS --max-time 5 --cacert %[3]s https://secure.test:%[4]d/; echo " https=$?"
curl -sS --max-time 5 http://other.test:%[2]d/ | tr -d '\n'; echo " other"
curl -sS --max-time 5 http://127.0.0.1:%[2]d/ | tr -d '\n'; echo " rawip"
curl -sS --max-time 5 http://localhost:%[2]d/ | tr -d '\n'; echo " localhost"
curl -s --max-time 5 --noproxy '*' http://127.0.0.1:%[2]d/; echo " direct=$?"
(echo x >/dev/udp/1.1.1.1/53) 2>/dev/null; echo " udp=$?"
(echo x >/dev/tcp/1.1.1.1/80) 2>/dev/null; echo " tcp=$?"
`, "http://127.0.0.1:"+fmt.Sprint(netallow.Port), wp, caFile, tp)
			p := Policy{FS: WorkspaceWrite, Network: NetworkAllowlist, Allow: MustHosts("web.test", "secure.test", "localhost", "127.0.0.2")}
			cmd := &osexec.Cmd{Dir: ws}
			var out strings.Builder
			cmd.Stdout, cmd.Stderr = &out, &out
			sess, err := h.Start(p, ws, []string{ws}, "/bin/bash", []string{"bash", "-c", script}, startWith(cmd))
			if err != nil {
				t.Fatal(err)
			}
			if sess == nil {
				t.Fatal("no proxy session")
			}
			err = cmd.Wait()
			sess.Close()
			got := out.String()
			for _, want := range []string{
				"hello web.test:" + fmt.Sprint(wp) + " http=0",
				"hello secure.test:" + fmt.Sprint(tp) + " https=0",
				"other.test:" + fmt.Sprint(wp) + ": not on the network allowlist other",
				"a raw address is reached only when the allowlist names it rawip",
				"resolves to 127.0.0.1, a loopback address the allowlist does not name localhost",
				" direct=7", " udp=1", " tcp=1",
			} {
				if !strings.Contains(got, want) {
					t.Errorf("output lacks %q:\n%s", want, got)
				}
			}
			if err != nil {
				t.Errorf("bash: %v", err)
			}
			rec := sess.Record()
			if len(rec.Reached) != 2 || len(rec.Refused) != 3 {
				t.Errorf("record %+v: want 2 reached, 3 refused", rec)
			}
		})
	}
}
