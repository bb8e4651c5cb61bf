package tests

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/dshd/dshd/internal/testenv"
)

// needTool fails under CI, and skips elsewhere, when a program is missing.
func needTool(t *testing.T, name string) {
	t.Helper()
	if _, err := exec.LookPath(name); err != nil {
		testenv.Need(t, "%s is not installed (make deps installs it)", name)
	}
}

// TestPythonClient runs the Python client's tests (clients/python/tests)
// against the real server: the shared scenario and every operation.
func TestPythonClient(t *testing.T) {
	t.Parallel()
	needTool(t, "python3")
	s := startServer(t)
	cmd := exec.Command("python3", "-m", "unittest", "discover", "-v", "-s", "tests", "-t", ".")
	cmd.Dir = "../clients/python"
	cmd.Env = append(cleanEnv(), "DSHD_URL="+s.URL, "DSHD_TOKEN="+s.Token, "PYTHONDONTWRITEBYTECODE=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("Python client tests failed: %v\n%s", err, out)
	}
	t.Logf("%s", out)
}

// TestTypeScriptClient checks that the TypeScript client's generated types
// are those of the contract as it is now, builds it with tsc (which also
// type-checks dshd's tool formats against the vendors' SDK types), and runs
// its tests against the real server: the shared scenario and the formats.
// `make deps` installs its pinned npm packages.
func TestTypeScriptClient(t *testing.T) {
	t.Parallel()
	needTool(t, "node")
	dir := "../clients/typescript"
	if _, err := os.Stat(dir + "/node_modules/.bin/tsc"); err != nil {
		testenv.Need(t, "clients/typescript has no node_modules: run make deps")
	}
	run := func(env []string, name string, args ...string) string {
		t.Helper()
		cmd := exec.Command(name, args...)
		cmd.Dir = dir
		cmd.Env = append(cleanEnv(), env...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s %v: %v\n%s", name, args, err, out)
		}
		return string(out)
	}
	fresh := filepath.Join(t.TempDir(), "schema.d.ts")
	run(nil, "node_modules/.bin/openapi-typescript", "../../api/openapi.yaml", "-o", fresh)
	want, err := os.ReadFile(fresh)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(dir + "/src/schema.d.ts")
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(want) {
		t.Fatal("clients/typescript/src/schema.d.ts is stale: run npm run generate in clients/typescript and commit it")
	}
	run(nil, "node_modules/.bin/tsc", "-p", ".")
	s := startServer(t)
	t.Logf("%s", run([]string{"DSHD_URL=" + s.URL, "DSHD_TOKEN=" + s.Token}, "node", "--test", "dist/test/"))
}
