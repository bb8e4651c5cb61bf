// Package tests holds end-to-end tests that drive the real dshd binary over
// real HTTP on loopback: the README's quick start, the full agent loop, the
// browser UI and the no-process-left-behind checks.
package tests

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dshd/dshd/internal/apitest"
	"github.com/dshd/dshd/internal/cgroup"
	dshexec "github.com/dshd/dshd/internal/exec"
)

// serverBinary is the dshd binary built once by TestMain; bareBinary, built
// only for benchmarks, is the minimal exec server they calibrate against.
var serverBinary, bareBinary string

func TestMain(m *testing.M) {
	os.Exit(buildAndRun(m))
}

func buildAndRun(m *testing.M) int {
	dir, err := os.MkdirTemp("", "dshd-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	serverBinary = filepath.Join(dir, "dshd")
	// Tests run the server with the race detector; benchmarks measure the
	// binary as it ships.
	args := []string{"build", "-race", "-o", serverBinary, "./cmd/dshd"}
	flag.Parse()
	if f := flag.Lookup("test.bench"); f != nil && f.Value.String() != "" {
		args = []string{"build", "-o", serverBinary, "./cmd/dshd"}
		bareBinary = filepath.Join(dir, "bareexec")
		bare := exec.Command("go", "build", "-o", bareBinary, "./tests/testdata/bareexec")
		bare.Dir = ".."
		bare.Stdout, bare.Stderr = os.Stderr, os.Stderr
		if err := bare.Run(); err != nil {
			fmt.Fprintln(os.Stderr, "build bareexec:", err)
			return 1
		}
	}
	build := exec.Command("go", args...)
	build.Dir = ".."
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build server:", err)
		return 1
	}
	code := m.Run()
	removeServerCgroups()
	return code
}

// homes are the homes of the servers the tests started.
var homes sync.Map

// removeServerCgroups removes the empty cgroup subtrees the tests' servers
// leave where a test ends with a crash (a server stopped cleanly removes
// its own): each is named after its home, in cgroup v2 and in every v1
// hierarchy. A crashed server's spare job groups (made ahead of jobs,
// empty) go first; a group still holding a process is left alone, and its
// subtree with it (rmdir refuses both).
func removeServerCgroups() {
	own, err := cgroup.OwnDir()
	homes.Range(func(k, _ any) bool {
		name := dshexec.CgroupName(k.(string))
		if err == nil {
			dir := filepath.Join(own, name)
			if ents, err := os.ReadDir(dir); err == nil {
				for _, e := range ents {
					if e.IsDir() {
						_ = os.Remove(filepath.Join(dir, e.Name()))
					}
				}
			}
			_ = os.Remove(dir)
		}
		if v1, err := cgroup.OpenV1(name, []string{"cpu", "memory", "pids"}); err == nil {
			v1.Close()
		}
		return true
	})
}

// testServer is one running dshd process.
type testServer struct {
	apitest.Client // URL and token; Do, DoJSON, SendRaw, …
	Home           string

	cmd    *exec.Cmd
	stdout *syncBuffer // everything the server printed on stdout
	stderr *syncBuffer
	done   chan struct{}
	err    error // the process's exit, valid after done
}

type serverConfig struct {
	home        string
	ambientHome bool
	env         []string
	args        []string
	config      string
	extraFiles  []*os.File
}

type serverOption func(*serverConfig)

// withHome runs the server on an existing home (a restart keeps its state).
func withHome(dir string) serverOption { return func(c *serverConfig) { c.home = dir } }

// withAmbientHome gives the server its home through $DSH_HOME in its own
// environment instead of --home.
func withAmbientHome(dir string) serverOption {
	return func(c *serverConfig) {
		c.home, c.ambientHome = dir, true
		c.env = append(c.env, "DSH_HOME="+dir)
	}
}

// withEnv adds KEY=VALUE pairs to the server's own environment.
func withEnv(kv ...string) serverOption {
	return func(c *serverConfig) { c.env = append(c.env, kv...) }
}

// withArgs adds command-line flags.
func withArgs(args ...string) serverOption {
	return func(c *serverConfig) { c.args = append(c.args, args...) }
}

// withExtraFiles starts the server with files open as its descriptors 3,
// 4, … (inherited without close-on-exec, as a shell's `dshd 3>>log`).
func withExtraFiles(fs ...*os.File) serverOption {
	return func(c *serverConfig) { c.extraFiles = append(c.extraFiles, fs...) }
}

// withConfig writes YAML into a config file passed with --config.
func withConfig(yaml string) serverOption { return func(c *serverConfig) { c.config = yaml } }

// startServer starts the dshd binary on 127.0.0.1:0 with a fresh home (unless
// withHome) and waits for its startup line. The server is stopped gracefully
// at cleanup, and the test fails if it does not stop.
func startServer(t testing.TB, opts ...serverOption) *testServer {
	t.Helper()
	var c serverConfig
	for _, o := range opts {
		o(&c)
	}
	if c.home == "" {
		c.home = filepath.Join(t.TempDir(), "home")
	}
	args := []string{"--addr", "127.0.0.1:0"}
	if !c.ambientHome {
		args = append(args, "--home", c.home)
	}
	if c.config != "" {
		p := filepath.Join(t.TempDir(), "config.yaml")
		if err := os.WriteFile(p, []byte(c.config), 0o600); err != nil {
			t.Fatal(err)
		}
		args = append(args, "--config", p)
	}
	args = append(args, c.args...)

	cmd := exec.Command(serverBinary, args...)
	cmd.Env = append(cleanEnv(), c.env...)
	cmd.ExtraFiles = c.extraFiles
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	homes.Store(c.home, true)
	s := &testServer{Home: c.home, cmd: cmd, stdout: &syncBuffer{}, stderr: &syncBuffer{}, done: make(chan struct{})}
	cmd.Stderr = s.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		s.err = cmd.Wait()
		close(s.done)
	}()
	t.Cleanup(func() {
		s.stop(t)
		if t.Failed() {
			// What the server logged is often the only account of a
			// failure seen once, on a loaded CI machine.
			out := s.stderr.String()
			if len(out) > 64<<10 {
				out = "…" + out[len(out)-64<<10:]
			}
			t.Logf("server %s (home %s) logged:\n%s", s.URL, s.Home, out)
		}
	})

	line := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(io.TeeReader(stdout, s.stdout))
		if sc.Scan() {
			line <- sc.Text()
		}
		close(line)
		_, _ = io.Copy(s.stdout, stdout)
	}()
	select {
	case l, ok := <-line:
		if !ok {
			t.Fatalf("server exited before its startup line; stderr:\n%s", s.stderr)
		}
		s.URL, s.Token = parseStartupLine(t, l)
	case <-time.After(30 * time.Second):
		t.Fatalf("no startup line within 30s; stderr:\n%s", s.stderr)
	}
	return s
}

// parseStartupLine reads the address and the token file's name from
// "dshd listening on http://… (home …, token in <file>) ui http://…/ui/ …",
// and the token from that file: the line itself never carries it.
func parseStartupLine(t testing.TB, line string) (url, token string) {
	t.Helper()
	rest, ok := strings.CutPrefix(line, "dshd listening on ")
	if !ok {
		t.Fatalf("unexpected startup line %q", line)
	}
	url, _, _ = strings.Cut(rest, " ")
	_, file, ok := strings.Cut(line, ", token in ")
	file, _, ok2 := strings.Cut(file, ") ui ")
	if !ok || !ok2 || file == "" {
		t.Fatalf("startup line %q does not say where the token is", line)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("read the token file the startup line names: %v", err)
	}
	token = strings.TrimSpace(string(b))
	if token == "" {
		t.Fatalf("token file %s is empty", file)
	}
	return url, token
}

// cleanEnv is the test process's environment without DSH_* names, so a
// developer's own settings cannot change what a test sees.
func cleanEnv() []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "DSH_") {
			out = append(out, kv)
		}
	}
	return out
}

// stop sends SIGTERM and waits for a clean exit.
func (s *testServer) stop(t testing.TB) {
	t.Helper()
	select {
	case <-s.done:
		return
	default:
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
		if s.err != nil {
			t.Errorf("server exit: %v; stderr:\n%s", s.err, s.stderr)
		}
	case <-time.After(30 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
		t.Errorf("server did not stop within 30s of SIGTERM; stderr:\n%s", s.stderr)
	}
}

// checkNoCgroupLeft fails t when the server that used home left its
// cgroup v2 subtree behind (a server that refused to start included).
func checkNoCgroupLeft(t *testing.T, home string) {
	t.Helper()
	own, err := cgroup.OwnDir()
	if err != nil {
		return // no cgroup v2 here: nothing to leave
	}
	dir := filepath.Join(own, dshexec.CgroupName(home))
	if _, err := os.Stat(dir); err == nil {
		t.Errorf("the server left its cgroup subtree %s", dir)
	}
}

// syncBuffer is a bytes.Buffer safe for one writer and concurrent readers.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// problem is the part of a problem+json body these tests read.
type problem = apitest.Problem
