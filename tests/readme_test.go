package tests

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestREADMEQuickStart runs the README's quick-start block, unchanged but for
// the server address, against a real server whose home is ~/.dsh of a fake
// HOME, and checks what each command answered.
func TestREADMEQuickStart(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	block := quickStartBlock(t, string(readme))

	userHome := t.TempDir()
	s := startServer(t, withHome(filepath.Join(userHome, ".dsh")))

	const defaultAddr = "DSHD=http://127.0.0.1:7433"
	if !strings.Contains(block, defaultAddr) {
		t.Fatalf("quick start no longer sets %s; update this test with the README", defaultAddr)
	}
	script := "set -euo pipefail\n" +
		// Fail on HTTP errors too, so a broken command cannot pass silently.
		"curl() { command curl --fail-with-body \"$@\"; echo; }\n" +
		strings.Replace(block, defaultAddr, "DSHD="+s.URL, 1)
	cmd := exec.Command("bash", "-c", script)
	cmd.Env = append(cleanEnv(), "HOME="+userHome)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("quick start failed: %v\n%s", err, out)
	}
	text := string(out)
	agent := regexp.MustCompile(`DSH_SESSION_ID=(agt_[0-9a-z]+)`).FindStringSubmatch(text)
	if agent == nil {
		t.Fatalf("the agent's command printed no DSH_SESSION_ID:\n%s", text)
	}
	for _, want := range []string{
		`"status":"ok"}`,        // healthz, after its details
		`"key":"DSH_HOME"`,      // declarations
		`"name":"demo.repo"`,    // registration
		"DSH_HOME=" + s.Home,    // the agent's exec: managed home
		"DSH_REPO=acme/widgets", // and the new contributor's fact
		"DSH_SHELL=1",           // and the shell marker
		`"text":"` + agent[1],   // the bash tool call echoes the same id
		`"state":"exited"`,      // the long-polled background job
		"event: stdout",         // its output as server-sent events
		`tick 3`,                // all of it
		"event: exit",           // and the end
	} {
		if !strings.Contains(text, want) {
			t.Errorf("quick start output lacks %q", want)
		}
	}
	if t.Failed() {
		t.Logf("output:\n%s", text)
	}
}

// quickStartBlock returns the first ```sh block under "## Quick start".
func quickStartBlock(t *testing.T, readme string) string {
	t.Helper()
	_, section, ok := strings.Cut(readme, "## Quick start")
	if !ok {
		t.Fatal("README has no Quick start section")
	}
	_, rest, ok := strings.Cut(section, "```sh\n")
	if !ok {
		t.Fatal("Quick start has no sh block")
	}
	block, _, ok := strings.Cut(rest, "```")
	if !ok {
		t.Fatal("unterminated sh block")
	}
	return block
}

// fencedBlock returns the first ```lang block after heading in doc, the text
// of the page named page.
func fencedBlock(t *testing.T, page, doc, heading, lang string) string {
	t.Helper()
	_, section, ok := strings.Cut(doc, heading)
	if !ok {
		t.Fatalf("%s has no %q section", page, heading)
	}
	_, rest, ok := strings.Cut(section, "```"+lang+"\n")
	if !ok {
		t.Fatalf("%q has no %s block", heading, lang)
	}
	block, _, ok := strings.Cut(rest, "```")
	if !ok {
		t.Fatalf("unterminated %s block under %q", lang, heading)
	}
	return block
}

// TestREADMEConfigAndHooks starts the real server with the configuration
// example of docs/configuration.md and the hooks file of docs/hooks.md,
// pasted as they are, together with --home (the combination an older
// example made the server refuse), and checks that the hooks do what
// docs/hooks.md says.
func TestREADMEConfigAndHooks(t *testing.T) {
	t.Parallel()
	configPage, err := os.ReadFile("../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	hooksPage, err := os.ReadFile("../docs/hooks.md")
	if err != nil {
		t.Fatal(err)
	}
	config := fencedBlock(t, "docs/configuration.md", string(configPage), "\n## The configuration file\n", "yaml")
	hooksFile := fencedBlock(t, "docs/hooks.md", string(hooksPage), "\n## Hook files\n", "json")

	home := filepath.Join(t.TempDir(), "home")
	if err := os.MkdirAll(filepath.Join(home, "hooks"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(home, "hooks", "claude-code.json"), []byte(hooksFile), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startServer(t, withHome(home), withConfig(config))

	var a struct {
		agent
		SessionStart struct {
			AdditionalContext []string `json:"additionalContext"`
		} `json:"sessionStart"`
	}
	if st := s.DoJSON(t, "POST", "/agents", map[string]any{"cwd": t.TempDir()}, &a); st != 201 {
		t.Fatalf("create agent = %d", st)
	}
	if got := a.SessionStart.AdditionalContext; len(got) != 1 || got[0] != "This repository is acme/widgets." {
		t.Errorf("SessionStart context = %q, want the README hook's", got)
	}
	victim := t.TempDir()
	var blocked toolResult
	if st := s.DoJSON(t, "POST", "/agents/"+a.ID+"/tools/bash", map[string]any{
		"arguments": map[string]any{"command": "rm -rf " + victim},
	}, &blocked); st != 200 {
		t.Fatalf("bash tool = %d", st)
	}
	if !blocked.IsError || !strings.Contains(blocked.Text, "rm -rf is not allowed here") {
		t.Errorf("rm -rf was not blocked with the hook's reason: %+v", blocked)
	}
	if _, err := os.Stat(victim); err != nil {
		t.Errorf("the blocked command ran: %v", err)
	}
	var ok toolResult
	if st := s.DoJSON(t, "POST", "/agents/"+a.ID+"/tools/bash", map[string]any{
		"arguments": map[string]any{"command": "echo fine"},
	}, &ok); st != 200 || ok.IsError || !strings.HasPrefix(ok.Text, "fine") {
		t.Errorf("echo through the hooks = %d %+v", st, ok)
	}
}

// TestREADMEOpenUI runs the README's command that opens the UI, with the
// built binary in place of "go run ./cmd/dshd" and the test server's
// address, for a user whose home is the default (~/.dsh of a fake HOME): it
// must print a login URL that signs the UI in.
func TestREADMEOpenUI(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	block := strings.TrimSpace(fencedBlock(t, "README.md", string(readme), "Open the UI with a one-time login link", "sh"))
	const command = "go run ./cmd/dshd ui"
	if block != command {
		t.Fatalf("the README opens the UI with %q; update this test with it (want %q)", block, command)
	}
	userHome := t.TempDir()
	s := startServer(t, withHome(filepath.Join(userHome, ".dsh")))
	cmd := exec.Command(serverBinary, "ui", "--addr", strings.TrimPrefix(s.URL, "http://"))
	cmd.Env = append(cleanEnv(), "HOME="+userHome)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s: %v", command, err)
	}
	loginURL := strings.TrimSpace(string(out))
	resp, body := rawRequest(t, "POST", s.URL+"/ui/session", `{"code":"`+loginCode(t, s, loginURL)+`"}`, nil)
	if resp.StatusCode != 201 {
		t.Errorf("the printed URL's code did not sign in: %d %s", resp.StatusCode, body)
	}
}
