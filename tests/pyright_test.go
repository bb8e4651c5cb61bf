package tests

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dshd/dshd/internal/testenv"
)

// TestPythonClientPyright type-checks the Python client, its README's
// example and the Python model loop of examples/ with pyright (pinned in
// tests/pyright) in strict mode, for the oldest Python the package
// supports: no error, no warning.
func TestPythonClientPyright(t *testing.T) {
	t.Parallel()
	needTool(t, "node")
	pyright, err := filepath.Abs("pyright/node_modules/.bin/pyright")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(pyright); err != nil {
		testenv.Need(t, "tests/pyright has no node_modules: run make deps")
	}
	client, err := filepath.Abs("../clients/python")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join(client, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	example := filepath.Join(tmp, "readme_example.py")
	writeFile(t, example, fencedBlock(t, "clients/python/README.md", string(readme), "# dshd Python client", "python"))
	cfg, err := json.Marshal(map[string]any{
		"typeCheckingMode": "strict",
		"pythonVersion":    "3.9",
		"extraPaths":       []string{client},
	})
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(tmp, "pyrightconfig.json"), string(cfg))
	files := []string{filepath.Join(client, "dshd"), example}
	loops, err := filepath.Glob("../examples/python/*_loop.py")
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, loops...)
	out, err := runIn(".", nil, pyright, append([]string{"-p", filepath.Join(tmp, "pyrightconfig.json")}, files...)...)
	if err != nil || !strings.Contains(out, "0 errors, 0 warnings") {
		t.Fatalf("pyright --strict: %v\n%s", err, out)
	}
	t.Logf("%s", out)
}
