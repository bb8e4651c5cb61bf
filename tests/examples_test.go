package tests

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"testing"
	"time"

	"github.com/dshd/dshd/internal/testenv"
)

// runBounded runs a program in dir with the clean environment plus env,
// killed after limit; it returns the combined output.
func runBounded(t *testing.T, limit time.Duration, dir string, env []string, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(cleanEnv(), env...)
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %v: %v\n%s", name, args, err, out)
	}
	return string(out)
}

// checkSID checks that the example printed "agent <id>" and that the model
// server received the result of its bash call, SID=<that id>.
func checkSID(t *testing.T, out string, ms *modelServer) {
	t.Helper()
	m := regexp.MustCompile(`(?m)^agent (\S+)$`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("the example printed no agent id:\n%s", out)
	}
	if !slices.Contains(ms.Results(), "SID="+m[1]) {
		t.Fatalf("the model did not receive SID=%s as its tool result: %s\n%s", m[1], ms.Log(), out)
	}
}

// TestExampleLoops runs each agent loop of examples/ against the real dshd
// and a scripted model server on loopback: the model asks for a bash call
// of `echo SID=$DSH_SESSION_ID`, and must get back, through the example's
// loop, the id of the agent the example created.
func TestExampleLoops(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	const command = "echo SID=$DSH_SESSION_ID"

	t.Run("typescript-openai-responses", func(t *testing.T) {
		t.Parallel()
		needTool(t, "node")
		client, err := filepath.Abs("../clients/typescript")
		if err != nil {
			t.Fatal(err)
		}
		mods := filepath.Join(client, "node_modules")
		if _, err := os.Stat(filepath.Join(mods, ".bin/tsc")); err != nil {
			testenv.Need(t, "clients/typescript has no node_modules: run make deps")
		}
		tmp := t.TempDir()
		// The client, built apart from the tree other tests build in.
		built := filepath.Join(tmp, "dshd-client")
		for _, d := range []string{built, filepath.Join(tmp, "example", "node_modules", "@types")} {
			if err := os.MkdirAll(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		for _, f := range []string{"package.json", "tsconfig.json", "src"} {
			mustRunIn(t, client, nil, "cp", "-R", f, filepath.Join(built, f))
		}
		example := filepath.Join(tmp, "example")
		for _, f := range []string{"package.json", "tsconfig.json", "responses_loop.ts"} {
			mustRunIn(t, "../examples/typescript", nil, "cp", f, filepath.Join(example, f))
		}
		for link, target := range map[string]string{
			filepath.Join(built, "node_modules"):               mods,
			filepath.Join(example, "node_modules/dshd-client"): built,
			filepath.Join(example, "node_modules/openai"):      filepath.Join(mods, "openai"),
			filepath.Join(example, "node_modules/@types/node"): filepath.Join(mods, "@types/node"),
		} {
			if err := os.Symlink(target, link); err != nil {
				t.Fatal(err)
			}
		}
		mustRunIn(t, built, nil, filepath.Join(mods, ".bin/tsc"), "-p", ".")
		mustRunIn(t, built, nil, "cp", "src/schema.d.ts", "dist/src/schema.d.ts")
		mustRunIn(t, example, nil, filepath.Join(mods, ".bin/tsc"), "-p", ".")

		ms := startModelServer(t, command)
		out := runBounded(t, 60*time.Second, example, []string{
			"DSHD_URL=" + s.URL, "DSHD_TOKEN=" + s.Token, "OPENAI_API_KEY=sk-test",
			"OPENAI_BASE_URL=" + ms.URL + "/v1", "OPENAI_MODEL=scripted",
		}, "node", "dist/responses_loop.js", "Print your session id.")
		checkSID(t, out, ms)
	})

	t.Run("python-anthropic-messages", func(t *testing.T) {
		t.Parallel()
		needTool(t, "python3")
		ms := startModelServer(t, command)
		out := runBounded(t, 60*time.Second, "../examples/python", []string{
			"DSHD_URL=" + s.URL, "DSHD_TOKEN=" + s.Token, "ANTHROPIC_API_KEY=test",
			"ANTHROPIC_BASE_URL=" + ms.URL, "ANTHROPIC_MODEL=scripted", "PYTHONDONTWRITEBYTECODE=1",
		}, "python3", "anthropic_loop.py", "Print your session id.")
		checkSID(t, out, ms)
	})
}
