package tests

import (
	"os"
	"os/exec"
	"testing"
)

// needTool fails under CI, and skips elsewhere, when a program is missing.
func needTool(t *testing.T, name string) {
	t.Helper()
	if _, err := exec.LookPath(name); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s is not installed; CI must run this test", name)
		}
		t.Skipf("%s not installed", name)
	}
}

// TestPythonClient runs the Python client's tests (clients/python/tests)
// against the real server: the shared scenario and every operation.
func TestPythonClient(t *testing.T) {
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
