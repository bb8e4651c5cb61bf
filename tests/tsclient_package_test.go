package tests

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/dshd/dshd/internal/testenv"
)

// runIn runs a program in dir with the clean environment and extra env, and
// returns its combined output and error.
func runIn(dir string, env []string, name string, args ...string) (string, error) {
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = append(cleanEnv(), env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// mustRunIn is runIn that fails the test on error.
func mustRunIn(t *testing.T, dir string, env []string, name string, args ...string) string {
	t.Helper()
	out, err := runIn(dir, env, name, args...)
	if err != nil {
		t.Fatalf("%s %v in %s: %v\n%s", name, args, dir, err, out)
	}
	return out
}

// TestTypeScriptClientPackage installs the TypeScript client as a user
// would, from the tarball `npm pack` makes (its `prepare` builds it), into
// an empty project with no registry at all: the client's dependencies are
// packed from its own pinned node_modules. There, with skipLibCheck off,
// the README's example compiles and runs against dshd (its tool call
// answers with the agent's DSH_SESSION_ID), and a misspelt path, a misspelt
// field and a bogus body each fail to compile.
func TestTypeScriptClientPackage(t *testing.T) {
	t.Parallel()
	needTool(t, "node")
	needTool(t, "npm")
	client, err := filepath.Abs("../clients/typescript")
	if err != nil {
		t.Fatal(err)
	}
	tsc := filepath.Join(client, "node_modules/.bin/tsc")
	if _, err := os.Stat(tsc); err != nil {
		testenv.Need(t, "clients/typescript has no node_modules: run make deps")
	}
	tmp := t.TempDir()
	npmEnv := []string{"npm_config_cache=" + filepath.Join(tmp, "npm-cache"), "npm_config_offline=true",
		"npm_config_update_notifier=false", "npm_config_audit=false", "npm_config_fund=false"}

	// A copy of the package's sources, so packing (which builds) never
	// writes into the tree another test builds in.
	src := filepath.Join(tmp, "src")
	if err := os.Mkdir(src, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"package.json", "package-lock.json", "tsconfig.json", "README.md", "src"} {
		mustRunIn(t, client, nil, "cp", "-R", f, filepath.Join(src, f))
	}
	if err := os.Symlink(filepath.Join(client, "node_modules"), filepath.Join(src, "node_modules")); err != nil {
		t.Fatal(err)
	}
	tarballs := filepath.Join(tmp, "tarballs")
	if err := os.Mkdir(tarballs, 0o755); err != nil {
		t.Fatal(err)
	}
	mustRunIn(t, src, npmEnv, "npm", "pack", "--pack-destination", tarballs)
	list := mustRunIn(t, filepath.Join(tarballs, ".."), nil, "tar", "-tzf", filepath.Join(tarballs, "dshd-client-0.1.0.tgz"))
	for _, want := range []string{"package/dist/src/index.js", "package/dist/src/index.d.ts", "package/dist/src/schema.d.ts"} {
		if !strings.Contains(list, want+"\n") {
			t.Fatalf("the packed client lacks %s:\n%s", want, list)
		}
	}
	// Its dependencies, and Node's types for the consumer, packed from the
	// pinned installs: the consumer project reaches no registry.
	deps := []string{"pack"}
	for _, dep := range []string{"openapi-fetch", "openapi-typescript-helpers", "@types/node", "undici-types"} {
		deps = append(deps, filepath.Join(client, "node_modules", dep))
	}
	mustRunIn(t, tarballs, npmEnv, "npm", deps...)
	tgz, err := filepath.Glob(filepath.Join(tarballs, "*.tgz"))
	if err != nil || len(tgz) != 5 {
		t.Fatalf("tarballs: %v %v", tgz, err)
	}

	consumer := filepath.Join(tmp, "consumer")
	if err := os.Mkdir(consumer, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(consumer, "package.json"), `{"name":"consumer","private":true,"type":"module"}`)
	writeFile(t, filepath.Join(consumer, "tsconfig.json"), `{
  "compilerOptions": {
    "target": "ES2022", "module": "NodeNext", "moduleResolution": "NodeNext",
    "strict": true, "skipLibCheck": false, "types": ["node"], "outDir": "out",
    "skipDefaultLibCheck": true
  },
  "files": ["main.ts", "mistakes.ts"]
}`)
	mustRunIn(t, consumer, npmEnv, "npm", append([]string{"install", "--no-package-lock", "--ignore-scripts"}, tgz...)...)

	readme, err := os.ReadFile(filepath.Join(client, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	example := fencedBlock(t, "clients/typescript/README.md", string(readme), "## Use", "ts")
	s := startServer(t)
	const readmeURL = `"http://127.0.0.1:7433"`
	if !strings.Contains(example, readmeURL) {
		t.Fatalf("the README's example does not connect to %s:\n%s", readmeURL, example)
	}
	main := "const token = process.env.DSHD_TOKEN!;\n" + strings.Replace(example, readmeURL, "process.env.DSHD_URL!", 1)
	// Mistakes the types must catch: each, in a function of its own in
	// mistakes.ts, is an error of tsc on its own line; main.ts, the README's
	// example, has none.
	mistakes := []struct{ name, old, new, want string }{
		{"misspelt path", `c.api.POST("/agents", `, `c.api.POST("/agentz", `, "TS2345"},
		{"misspelt field", `result.isError, result.text`, `result.isError, result.txt`, "TS2551"},
		{"bogus body", `body: { arguments: { command:`, `body: { argumentz: { command:`, "TS2561"},
		{"wrong tool format", `t.name`, `t.function.name`, "TS2339"},
	}
	const imports = "import { createDshdClient, listTools, must } from \"dshd-client\";\n"
	body, ok := strings.CutPrefix(strings.Replace(example, readmeURL, "process.env.DSHD_URL!", 1), imports)
	if !ok {
		t.Fatalf("the README's example does not start with %q:\n%s", imports, example)
	}
	bad := imports + "const token = process.env.DSHD_TOKEN!;\n"
	lines := map[string]int{} // mistake -> line of the wrong text
	for i, m := range mistakes {
		j := strings.Index(body, m.old)
		if j < 0 {
			t.Fatalf("%s: the README's example has no %q", m.name, m.old)
		}
		lines[m.name] = strings.Count(bad, "\n") + 2 + strings.Count(body[:j], "\n")
		bad += fmt.Sprintf("export async function mistake%d() {\n%s}\n", i, strings.Replace(body, m.old, m.new, 1))
	}
	writeFile(t, filepath.Join(consumer, "main.ts"), main)
	writeFile(t, filepath.Join(consumer, "mistakes.ts"), bad)
	out, err := runIn(consumer, nil, tsc, "-p", ".")
	if err == nil {
		t.Fatalf("a consumer with every mistake compiled:\n%s", bad)
	}
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "main.ts") || strings.HasPrefix(l, "node_modules") {
			t.Errorf("the README's example does not compile in a consumer project: %s", l)
		}
	}
	for _, m := range mistakes {
		want := fmt.Sprintf("mistakes.ts(%d,", lines[m.name])
		found := false
		for _, l := range strings.Split(out, "\n") {
			if strings.HasPrefix(l, want) && strings.Contains(l, m.want) {
				found = true
			}
		}
		if !found {
			t.Errorf("%s: no %s at line %d; tsc said:\n%s", m.name, m.want, lines[m.name], out)
		}
	}
	if t.Failed() {
		t.FailNow()
	}

	// tsc emitted main.js all the same: run the example against dshd.
	out, err = runIn(consumer, []string{"DSHD_URL=" + s.URL, "DSHD_TOKEN=" + s.Token}, "node", "out/main.js")
	if err != nil {
		t.Fatalf("the README's example failed: %v\n%s", err, out)
	}
	if !regexp.MustCompile(`(?m)^false SID=agt_\S+$`).MatchString(out) {
		t.Fatalf("the README's tool call did not answer with the agent's DSH_SESSION_ID:\n%s", out)
	}
	if !strings.Contains(out, `'bash'`) {
		t.Fatalf("listTools did not list bash:\n%s", out)
	}
	// The README says what the refused registration answers.
	if !regexp.MustCompile(`(?m)^422 invalid_declaration$`).MatchString(out) || !strings.Contains(example, "422 invalid_declaration") {
		t.Fatalf("the README's refused registration did not answer 422 invalid_declaration as its comment says:\n%s", out)
	}
}

// writeFile writes text to path or fails the test.
func writeFile(t *testing.T, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}
