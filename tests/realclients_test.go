package tests

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dshd/dshd/internal/testenv"
)

// mcpDoc is the text that documents the MCP clients' configuration:
// docs/mcp.md.
func mcpDoc(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../docs/mcp.md")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// realClient finds a pinned client's file under tests/realclients, or
// skips (fails in CI) when make deps has not installed it.
func realClient(t *testing.T, rel string) string {
	t.Helper()
	p, err := filepath.Abs(filepath.Join("realclients/node_modules", rel))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p); err != nil {
		testenv.Need(t, "tests/realclients has no %s: run make deps", rel)
	}
	return p
}

// quietEnv is what keeps a client from reaching anything but loopback on
// its own: no update checks, telemetry, error reports or other traffic.
var quietEnv = []string{
	"DISABLE_AUTOUPDATER=1", "DISABLE_TELEMETRY=1", "DISABLE_ERROR_REPORTING=1", "DISABLE_BUG_COMMAND=1",
	"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1", "CLAUDE_CODE_DISABLE_FEEDBACK_SURVEY=1",
	// Anything not on loopback goes to a closed loopback port.
	"NO_PROXY=127.0.0.1,localhost", "HTTPS_PROXY=http://127.0.0.1:9", "HTTP_PROXY=http://127.0.0.1:9",
	"https_proxy=http://127.0.0.1:9", "http_proxy=http://127.0.0.1:9", "no_proxy=127.0.0.1,localhost", "CI=1",
}

var sidRE = regexp.MustCompile(`SID=([A-Za-z0-9_-]+)`)

// checkModelGotSID checks that dshd made exactly one agent for the client's
// session and that the model received SID=<its id> as the result of the
// bash call, recorded in the agent's transcript.
func checkModelGotSID(t *testing.T, s *testServer, ms *modelServer, out string) {
	t.Helper()
	var agents []struct {
		ID string `json:"id"`
	}
	if st := s.DoJSON(t, "GET", "/agents", nil, &agents); st != 200 {
		t.Fatalf("GET /agents = %d", st)
	}
	if len(agents) != 1 {
		t.Fatalf("dshd has %d agents, want the client's one: %+v\n%s\n%s", len(agents), agents, ms.Log(), out)
	}
	// Clients wrap a result in their own words ("Wall time: …\nOutput:",
	// a trailing reminder): the SID the model read is what follows SID=.
	id := agents[0].ID
	var got []string
	for _, r := range ms.Results() {
		for _, m := range sidRE.FindAllStringSubmatch(r, -1) {
			got = append(got, m[1])
		}
	}
	if !slices.Equal(got, []string{id}) {
		t.Fatalf("the model received DSH_SESSION_IDs %q, want [%s]: %s\nclient output:\n%s", got, id, ms.Log(), out)
	}
	if calls := s.transcript(t, id, "tool/call"); len(calls) != 1 {
		t.Fatalf("the agent's transcript has %d tool calls, want 1", len(calls))
	}
}

// TestRealClientsOverMCP runs Claude Code, Codex and Gemini CLI, the npm
// packages pinned in tests/realclients, headless against dshd's /mcp and a
// scripted model server on loopback (Claude Code on the Anthropic Messages
// API through ANTHROPIC_BASE_URL, Codex on the Responses API through a model
// provider's base_url, Gemini CLI on the Gemini API through
// GOOGLE_GEMINI_BASE_URL), each configured with the snippet the
// documentation gives for it, pasted as it is but for the server's address.
// The model asks for `echo SID=$DSH_SESSION_ID` through dshd's bash and must
// get back the id of the agent dshd made for the client's session; Claude
// Code and Gemini CLI also after 75 s of silence (Claude Code gives up on
// an answer whose headers take 60 s).
func TestRealClientsOverMCP(t *testing.T) {
	t.Parallel()
	doc := mcpDoc(t)
	const docURL = "http://127.0.0.1:7433/mcp"
	const command = "echo SID=$DSH_SESSION_ID"

	// claude runs Claude Code with the documented .mcp.json; the model asks
	// for command through dshd's bash.
	claude := func(t *testing.T, command string, bound time.Duration) {
		claude := realClient(t, "@anthropic-ai/claude-code-linux-x64/claude")
		snippet := fencedBlock(t, "docs/mcp.md", doc, "Add dshd to **Claude Code**", "json")
		if !strings.Contains(snippet, docURL) || !strings.Contains(snippet, "${DSHD_TOKEN}") {
			t.Fatalf("the Claude Code snippet no longer names %s with ${DSHD_TOKEN}:\n%s", docURL, snippet)
		}
		s := startServer(t)
		ms := startModelServer(t, command)
		home := t.TempDir()
		project := filepath.Join(home, "project")
		if err := os.Mkdir(project, 0o755); err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(project, ".mcp.json"), strings.Replace(snippet, docURL, s.URL+"/mcp", 1))
		start := time.Now()
		out := runBounded(t, bound, project, append([]string{
			"HOME=" + home, "DSHD_TOKEN=" + s.Token,
			"ANTHROPIC_BASE_URL=" + ms.URL, "ANTHROPIC_API_KEY=sk-ant-test",
		}, quietEnv...), claude, "-p", "Print your session id with the dshd bash tool.",
			"--mcp-config", ".mcp.json", "--strict-mcp-config",
			"--allowedTools", "mcp__dshd__bash", "--model", "claude-sonnet-4-5", "--max-turns", "4")
		t.Logf("claude -p: %v", time.Since(start))
		checkModelGotSID(t, s, ms, out)
	}
	t.Run("claude-code", func(t *testing.T) {
		t.Parallel()
		claude(t, command, 120*time.Second)
	})
	// A command silent for longer than the 60 s Claude Code waits for an
	// answer's headers keeps its result: dshd answers as the call starts.
	t.Run("claude-code-silent", func(t *testing.T) {
		t.Parallel()
		claude(t, "sleep 75; "+command, 200*time.Second)
	})

	// gemini runs Gemini CLI with the documented settings.json entry; the
	// model asks for command through dshd's bash.
	gemini := func(t *testing.T, command string, bound time.Duration) {
		needTool(t, "node")
		gemini := realClient(t, "@google/gemini-cli/bundle/gemini.js")
		snippet := fencedBlock(t, "docs/mcp.md", doc, "Add dshd to **Gemini CLI**", "json")
		if !strings.Contains(snippet, docURL) || !strings.Contains(snippet, "$DSHD_TOKEN") || !strings.Contains(snippet, `"trust": true`) {
			t.Fatalf("the Gemini CLI snippet no longer names %s with $DSHD_TOKEN, trusted:\n%s", docURL, snippet)
		}
		s := startServer(t)
		ms := startModelServer(t, command)
		home := t.TempDir()
		work := filepath.Join(home, "work")
		if err := os.MkdirAll(filepath.Join(home, ".gemini"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Mkdir(work, 0o755); err != nil {
			t.Fatal(err)
		}
		// The snippet as it is, beside the scripted model's API key auth
		// (with GOOGLE_GEMINI_BASE_URL alone Gemini CLI picks a gateway auth
		// that headless mode refuses).
		var settings map[string]any
		if err := json.Unmarshal([]byte(strings.Replace(snippet, docURL, s.URL+"/mcp", 1)), &settings); err != nil {
			t.Fatalf("the Gemini CLI snippet is not JSON: %v\n%s", err, snippet)
		}
		settings["security"] = map[string]any{"auth": map[string]any{"selectedType": "gemini-api-key"}}
		b, err := json.MarshalIndent(settings, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(home, ".gemini", "settings.json"), string(b))
		start := time.Now()
		out := runBounded(t, bound, work, append([]string{
			"HOME=" + home, "DSHD_TOKEN=" + s.Token,
			"GEMINI_API_KEY=test", "GOOGLE_GEMINI_BASE_URL=" + ms.URL, "GEMINI_CLI_NO_RELAUNCH=true",
		}, quietEnv...), "node", gemini, "-p", "Print your session id with the dshd bash tool.",
			"--skip-trust", "--model", "gemini-2.5-pro", "--output-format", "text")
		t.Logf("gemini -p: %v", time.Since(start))
		checkModelGotSID(t, s, ms, out)
	}
	t.Run("gemini-cli", func(t *testing.T) {
		t.Parallel()
		gemini(t, command, 120*time.Second)
	})
	// Gemini CLI reads the keep-alive comments of a silent command's
	// stream and its result. (Here, under Node 20, Gemini CLI 0.61.0 also
	// waits past 60 s for headers, so unlike Claude Code's this case does
	// not fail on a stream that opens only with its result.)
	t.Run("gemini-cli-silent", func(t *testing.T) {
		t.Parallel()
		gemini(t, "sleep 75; "+command, 200*time.Second)
	})

	t.Run("codex", func(t *testing.T) {
		t.Parallel()
		needTool(t, "node")
		codex := realClient(t, "@openai/codex/bin/codex.js")
		snippet := fencedBlock(t, "docs/mcp.md", doc, "Add dshd to **Codex**", "toml")
		if !strings.Contains(snippet, docURL) || !strings.Contains(snippet, `bearer_token_env_var = "DSHD_TOKEN"`) {
			t.Fatalf("the Codex snippet no longer names %s with DSHD_TOKEN:\n%s", docURL, snippet)
		}
		s := startServer(t)
		ms := startModelServer(t, command)
		home := t.TempDir()
		codexHome := filepath.Join(home, ".codex")
		work := filepath.Join(home, "work")
		for _, d := range []string{codexHome, work} {
			if err := os.Mkdir(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		// The provider (the scripted model) and the quiet settings come
		// first: TOML's top-level keys must precede the snippet's table.
		config := `model = "scripted"
model_provider = "scripted"
approval_policy = "never"
sandbox_mode = "read-only"
check_for_update_on_startup = false
web_search = "disabled"
cli_auth_credentials_store = "file"

[analytics]
enabled = false

[features]
plugins = false
apps = false
shell_snapshot = false

[model_providers.scripted]
name = "scripted"
base_url = "` + ms.URL + `/v1"
wire_api = "responses"
env_key = "SCRIPTED_API_KEY"
request_max_retries = 0
stream_max_retries = 0

` + strings.Replace(snippet, docURL, s.URL+"/mcp", 1)
		writeFile(t, filepath.Join(codexHome, "config.toml"), config)
		start := time.Now()
		out := runBounded(t, 120*time.Second, work, append([]string{
			"HOME=" + home, "CODEX_HOME=" + codexHome, "DSHD_TOKEN=" + s.Token, "SCRIPTED_API_KEY=test",
			"OPENAI_API_KEY=", "RUST_LOG=warn",
		}, quietEnv...), "node", codex, "exec", "--skip-git-repo-check", "Print your session id with the dshd bash tool.")
		t.Logf("codex exec: %v", time.Since(start))
		checkModelGotSID(t, s, ms, out)
	})
}
