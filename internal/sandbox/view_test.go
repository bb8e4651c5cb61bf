package sandbox

import (
	"context"
	"fmt"
	"net/http/httptest"
	"net/netip"
	"os"
	osexec "os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/dshd/dshd/internal/netallow"
	"github.com/dshd/dshd/internal/netallow/netallowtest"
	"github.com/dshd/dshd/internal/testenv"
	"golang.org/x/sys/unix"
)

// TestStartInView runs commands seeing a view (a detached tmpfs) at their workspace, unconfined and under each mechanism's
// policies: they see the view there, write into it exactly as the policy
// allows, and the host's directory at that path never changes.
func TestStartInView(t *testing.T) {
	needRoot(t)
	ctx := context.Background()
	for _, mech := range []Mechanism{MechanismNamespaces, MechanismBubblewrap} {
		t.Run(string(mech), func(t *testing.T) {
			testenv.SkipMechanism(t, string(mech))
			l := newLayout(t)
			if err := os.WriteFile(filepath.Join(l.ws, "host.txt"), []byte("host"), 0o644); err != nil {
				t.Fatal(err)
			}
			// A detached tmpfs (as a workspace's overlay is detached).
			fsfd, err := unix.Fsopen("tmpfs", unix.FSOPEN_CLOEXEC)
			if err != nil {
				t.Fatal(err)
			}
			if err := unix.FsconfigCreate(fsfd); err != nil {
				t.Fatal(err)
			}
			fd, err := unix.Fsmount(fsfd, unix.FSMOUNT_CLOEXEC, 0)
			unix.Close(fsfd)
			if err != nil {
				t.Fatal(err)
			}
			defer unix.Close(fd)
			other := "/proc/self/fd/" + strconv.Itoa(fd)
			if err := os.WriteFile(filepath.Join(other, "view.txt"), []byte("view"), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Mkdir(filepath.Join(other, ".git"), 0o755); err != nil {
				t.Fatal(err)
			}
			view := &View{Target: l.ws, FD: fd}
			h := NewHost(ctx, Config{Mechanism: mech, Home: l.home, TokenFile: l.token})
			if h.Mechanism() != mech {
				t.Fatalf("mechanism %q unavailable: %s", mech, h.Support().Reason)
			}
			for _, tc := range []struct {
				p         Policy
				wantWrite bool
			}{
				{Default, true},
				{Policy{FS: WorkspaceWrite, Network: NetworkOff}, true},
				{Policy{FS: ReadOnly, Network: NetworkOn}, false},
			} {
				name := "w-" + strings.ReplaceAll(string(tc.p.FS), "-", "")
				os.Remove(filepath.Join(other, name))
				cmd := &osexec.Cmd{Dir: l.ws}
				var out strings.Builder
				cmd.Stdout, cmd.Stderr = &out, &out
				_, err := h.StartIn(view, tc.p, l.ws, []string{l.ws}, "/bin/bash", []string{"bash", "-c", "cat view.txt; ls; echo x > " + name + "; if echo x > .git/hook; then echo git-writable; fi 2>/dev/null"}, func(path string, args []string, extra []*os.File) error {
					cmd.Path, cmd.Args, cmd.ExtraFiles = path, args, extra
					return cmd.Start()
				})
				if err == nil {
					err = cmd.Wait()
				}
				if !strings.HasPrefix(out.String(), "view") || strings.Contains(out.String(), "host.txt") {
					t.Errorf("%s: the command did not see the view: %q", tc.p, out.String())
				}
				_, serr := os.Stat(filepath.Join(other, name))
				if wrote := serr == nil; wrote != tc.wantWrite || err != nil {
					t.Errorf("%s: wrote %v (err %v), want %v: %q", tc.p, wrote, err, tc.wantWrite, out.String())
				}
				// The view's .git stays read-only under every confining
				// policy (it is looked for in the view, not the host).
				if tc.p.Confined() && strings.Contains(out.String(), "git-writable") {
					t.Errorf("%s: the view's .git was writable", tc.p)
				}
				if _, err := os.Stat(filepath.Join(l.ws, name)); err == nil {
					t.Errorf("%s: the write reached the host's directory", tc.p)
				}
			}

			// The view and the network allowlist together: the command
			// sees the view and reaches a listed host through the proxy,
			// and nothing directly.
			web := httptest.NewServer(netallowtest.Hello)
			defer web.Close()
			px, err := netallow.New(netallow.Config{Hosts: map[string][]netip.Addr{"web.test": {netip.MustParseAddr("127.0.0.1")}}})
			if err != nil {
				t.Fatal(err)
			}
			hp := NewHost(ctx, Config{Mechanism: mech, Home: l.home, TokenFile: l.token, Proxy: px})
			p := Policy{FS: WorkspaceWrite, Network: NetworkAllowlist, Allow: MustHosts("web.test")}
			wp := netallowtest.Port(web)
			cmd := &osexec.Cmd{Dir: l.ws}
			var out strings.Builder
			cmd.Stdout, cmd.Stderr = &out, &out
			sess, err := hp.StartIn(view, p, l.ws, []string{l.ws}, "/bin/bash", []string{"bash", "-c", fmt.Sprintf(`cat view.txt; echo
curl -sS --max-time 5 -x http://127.0.0.1:%d http://web.test:%d/; echo " proxied=$?"
curl -s --max-time 5 --noproxy '*' http://127.0.0.1:%d/; echo " direct=$?"`, netallow.Port, wp, wp)}, startWith(cmd))
			if err != nil {
				t.Fatalf("%s in a view: %v", p, err)
			}
			if sess == nil {
				t.Fatalf("%s in a view: no proxy session", p)
			}
			_ = cmd.Wait()
			sess.Close()
			got := out.String()
			for _, want := range []string{"view\n", fmt.Sprintf("hello web.test:%d proxied=0", wp), " direct=7"} {
				if !strings.Contains(got, want) {
					t.Errorf("%s in a view: output lacks %q:\n%s", p, want, got)
				}
			}
		})
	}
}
