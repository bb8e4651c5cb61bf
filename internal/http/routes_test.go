package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"

	contract "github.com/dshd/dshd/api"
	"github.com/dshd/dshd/internal/agents"
	"github.com/dshd/dshd/internal/cluster/status"
	"github.com/dshd/dshd/internal/exec"
	"github.com/dshd/dshd/internal/files"
	"github.com/dshd/dshd/internal/hooks"
	"github.com/dshd/dshd/internal/limits"
	"github.com/dshd/dshd/internal/mcp"
	"github.com/dshd/dshd/internal/run"
	"github.com/dshd/dshd/internal/sandbox"
	"github.com/dshd/dshd/internal/shellenv"
	"github.com/dshd/dshd/internal/skills"
	"github.com/dshd/dshd/internal/tools"
	"github.com/dshd/dshd/internal/workspace"
)

// failing fakes every collaborator of the server: each method returns err.
// The table tests below drive each route over it, so the translation of
// domain errors to statuses and problem codes is tested without a process,
// a file or a registry.
type failing struct{ err error }

func (f *failing) Register(context.Context, shellenv.Spec) (shellenv.Contributor, error) {
	return shellenv.Contributor{}, f.err
}
func (f *failing) Unregister(context.Context, string) error { return f.err }
func (f *failing) Contributor(string) (shellenv.Contributor, error) {
	return shellenv.Contributor{}, f.err
}
func (f *failing) Contributors() []shellenv.Contributor { return nil }
func (f *failing) Declarations() []shellenv.Declaration { return nil }
func (f *failing) OpenPlugin(context.Context, string, time.Duration) (shellenv.Plugin, error) {
	return shellenv.Plugin{}, f.err
}
func (f *failing) Plugin(string) (shellenv.Plugin, error) { return shellenv.Plugin{}, f.err }
func (f *failing) Plugins() []shellenv.Plugin             { return nil }
func (f *failing) RenewPlugin(context.Context, string, time.Duration) (shellenv.Plugin, error) {
	return shellenv.Plugin{}, f.err
}
func (f *failing) ClosePlugin(context.Context, string) error { return f.err }

func (f *failing) Job(string) (*exec.Job, error)           { return nil, f.err }
func (f *failing) Jobs(string, exec.State) []exec.Snapshot { return nil }
func (f *failing) Cancel(context.Context, string) (exec.Snapshot, error) {
	return exec.Snapshot{}, f.err
}

func (f *failing) WriteInput(context.Context, string, []byte, bool) (exec.Snapshot, error) {
	return exec.Snapshot{}, f.err
}
func (f *failing) Resize(string, int, int) (exec.Snapshot, error) { return exec.Snapshot{}, f.err }
func (f *failing) Signal(string, string) (exec.Snapshot, error)   { return exec.Snapshot{}, f.err }

func (f *failing) Exec(context.Context, run.ExecRequest) (*exec.Job, error) { return nil, f.err }
func (f *failing) Call(context.Context, string, string, string, json.RawMessage) (run.CallResult, error) {
	return run.CallResult{}, f.err
}
func (f *failing) CreateAgent(context.Context, string, agents.Bounds) (run.Session, error) {
	return run.Session{}, f.err
}
func (f *failing) ResumeAgent(context.Context, string) (run.Session, error) {
	return run.Session{}, f.err
}
func (f *failing) ForkAgent(context.Context, string, *int64, agents.Bounds, workspace.Mode) (run.Session, error) {
	return run.Session{}, f.err
}
func (f *failing) SpawnAgent(context.Context, string, agents.Bounds, workspace.Mode) (run.Session, error) {
	return run.Session{}, f.err
}

func (f *failing) CreateAgentIn(context.Context, string, agents.Bounds, workspace.Mode) (run.Session, error) {
	return run.Session{}, f.err
}
func (f *failing) ForkAgentFrom(context.Context, string, string, agents.Bounds) (run.Session, error) {
	return run.Session{}, f.err
}
func (f *failing) SpawnAgentFrom(context.Context, string, string, agents.Bounds) (run.Session, error) {
	return run.Session{}, f.err
}
func (f *failing) Checkpoints(context.Context, string, bool) ([]run.CheckpointInfo, workspace.CheckpointList, error) {
	return nil, workspace.CheckpointList{}, f.err
}

func (f *failing) CheckpointDiff(context.Context, string, string, string, bool) ([]workspace.Change, error) {
	return nil, f.err
}
func (f *failing) Rewind(context.Context, string, string, bool, bool) (int, error) { return 0, f.err }

func (f *failing) FileScope(context.Context, string) (*files.Scope, func(), error) {
	return nil, nil, f.err
}
func (f *failing) OnViewRemount(string, func(int)) func() { return func() {} }

func (f *failing) Get(context.Context, string) (agents.Agent, error) { return agents.Agent{}, f.err }
func (f *failing) List(context.Context) ([]agents.Agent, error)      { return nil, f.err }
func (f *failing) Transcript(context.Context, string) ([]byte, error) {
	return nil, f.err
}

func (f *failing) Info(string) workspace.Info                       { return workspace.Info{Mode: workspace.Shared} }
func (f *failing) Available() (bool, string)                        { return false, "failing" }
func (f *failing) Usage() (int64, int)                              { return 0, 0 }
func (f *failing) Budget() (int64, bool)                            { return 0, false }
func (f *failing) Drop(string) error                                { return f.err }
func (f *failing) Changes(string, bool) ([]workspace.Change, error) { return nil, f.err }
func (f *failing) Apply(string, string) (workspace.Applied, error) {
	return workspace.Applied{}, f.err
}

func (f *failing) Handlers() []hooks.Handler { return nil }

func (f *failing) ServeMCP(http.ResponseWriter, *http.Request) error { return f.err }

// JobOwner plays a cluster whose job owner is gone when f.err says so;
// otherwise every job is local.
func (f *failing) JobOwner(string) (*url.URL, error) {
	if errors.Is(f.err, status.ErrOwnerUnavailable) {
		return nil, f.err
	}
	return nil, nil
}

// ClaimKey plays a cluster whose key claims fail when f.err says so.
func (f *failing) ClaimKey(context.Context, string) (*url.URL, string, error) {
	if errors.Is(f.err, status.ErrClaimUnavailable) || errors.Is(f.err, status.ErrOwnerUnavailable) {
		return nil, "", f.err
	}
	return nil, "", nil
}

// AgentHome plays a cluster whose agent's replica is gone when f.err says
// so; otherwise every agent is local.
func (f *failing) AgentHome(string) (*url.URL, error) {
	if errors.Is(f.err, status.ErrAgentHomeUnavailable) {
		return nil, f.err
	}
	return nil, nil
}

// SessionHome plays a cluster whose MCP session's replica is gone when
// f.err says so; otherwise every session is local.
func (f *failing) SessionHome(string) (*url.URL, error) {
	if errors.Is(f.err, status.ErrSessionHomeUnavailable) {
		return nil, f.err
	}
	return nil, nil
}

// skillsFailing is a skillLister: its List has the same name as the agent
// service's, so it cannot live on failing.
type skillsFailing struct{ f *failing }

func (s skillsFailing) List(context.Context) ([]skills.Skill, error) { return nil, s.f.err }

const testToken = "tttttttttttttttttttttttttttttttt"

// newFailingServer serves the contract over fakes that all return f.err;
// tests change f.err between requests (never concurrently).
func newFailingServer(t *testing.T) (*httptest.Server, *failing) {
	t.Helper()
	f := &failing{}
	h, err := NewServer(Deps{
		Logger: discardLogger(), Token: testToken, Spec: contract.OpenAPI,
		Env: f, Jobs: f, Pipeline: f, Agents: f, Workspaces: f, Hooks: f, Skills: skillsFailing{f}, MCP: f, JobRouter: f, ReplicaID: "replica-test", Files: f,
		MaxBodyBytes: 4096,
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv, f
}

// route is one operation of the contract with a request that passes the
// contract's validation, and the domain errors its collaborators can return
// (as their documentation says).
type route struct {
	method, pattern string // as in api/openapi.yaml
	path, body      string // a concrete request
	errs            []error
}

var (
	enospc = &fs.PathError{Op: "write", Path: "/home/x", Err: syscall.ENOSPC}
	edquot = &fs.PathError{Op: "write", Path: "/home/x", Err: syscall.EDQUOT}
)

// What the file routes can answer: the agent, its view, and the path.
var (
	fileReadErrs = []error{agents.ErrNotFound, status.ErrAgentStoreUnavailable, workspace.ErrDropped, workspace.ErrUnavailable,
		files.ErrInvalidPath, files.ErrNotFound, files.ErrHidden, files.ErrThroughLink, files.ErrNotDir, files.ErrNotRegular}
	fileWriteErrs = []error{agents.ErrNotFound, status.ErrAgentStoreUnavailable, workspace.ErrDropped, workspace.ErrUnavailable,
		files.ErrInvalidPath, files.ErrNotFound, files.ErrNotWritable, files.ErrProtected, files.ErrHidden, files.ErrThroughLink,
		files.ErrNotDir, files.ErrIsDir, files.ErrNotEmpty, enospc}
)

// routes lists every operation of the contract. Routes answered without a
// collaborator that can fail list no errors.
var routes = []route{
	{"GET", "/healthz", "/healthz", "", nil},
	{"GET", "/openapi.yaml", "/openapi.yaml", "", nil},
	{"GET", "/openapi.json", "/openapi.json", "", nil},
	{"GET", "/metrics", "/metrics", "", nil},
	{"POST", "/ui/login-codes", "/ui/login-codes", "", nil},
	{"POST", "/ui/session", "/ui/session", `{"token":"x"}`, nil},
	{"DELETE", "/ui/session", "/ui/session", "", nil},
	{"GET", "/env/declarations", "/env/declarations", "", nil},
	{"GET", "/contributors", "/contributors", "", nil},
	{"POST", "/contributors", "/contributors",
		`{"name":"demo.repo","keys":[{"key":"DSH_REPO","description":"d"}],"resolver":{"kind":"static","values":{"DSH_REPO":"v"}}}`,
		[]error{shellenv.ErrDuplicateContributor, shellenv.ErrKeyOwned, shellenv.ErrReservedKey, shellenv.ErrInvalidDeclaration, shellenv.ErrPluginNotFound, enospc, edquot, shellenv.ErrStoreUnavailable}},
	{"GET", "/contributors/{name}", "/contributors/demo.repo", "", []error{shellenv.ErrContributorNotFound}},
	{"DELETE", "/contributors/{name}", "/contributors/demo.repo", "", []error{shellenv.ErrContributorNotFound, shellenv.ErrBuiltinContributor, enospc, shellenv.ErrStoreUnavailable}},
	{"GET", "/plugins", "/plugins", "", nil},
	{"POST", "/plugins", "/plugins", `{"name":"demo"}`, []error{shellenv.ErrInvalidPlugin, shellenv.ErrStoreUnavailable}},
	{"GET", "/plugins/{id}", "/plugins/plg_1", "", []error{shellenv.ErrPluginNotFound}},
	{"DELETE", "/plugins/{id}", "/plugins/plg_1", "", []error{shellenv.ErrPluginNotFound, shellenv.ErrStoreUnavailable}},
	{"POST", "/plugins/{id}/renew", "/plugins/plg_1/renew", `{}`, []error{shellenv.ErrPluginNotFound, shellenv.ErrInvalidPlugin, shellenv.ErrStoreUnavailable}},
	{"GET", "/agents", "/agents", "", []error{status.ErrAgentStoreUnavailable}},
	{"POST", "/agents", "/agents", `{}`, []error{agents.ErrInvalidCwd, sandbox.ErrUnavailable, sandbox.ErrInvalid, limits.ErrInvalid, workspace.ErrUnavailable, workspace.ErrInvalid, workspace.ErrOverBudget, enospc, status.ErrAgentStoreUnavailable, agents.ErrConflict}},
	{"GET", "/agents/{id}", "/agents/agt_1", "", []error{agents.ErrNotFound, status.ErrAgentStoreUnavailable}},
	{"POST", "/agents/{id}/resume", "/agents/agt_1/resume", "", []error{agents.ErrNotFound, enospc, status.ErrAgentHomeUnavailable, status.ErrAgentStoreUnavailable, agents.ErrConflict}},
	{"POST", "/agents/{id}/fork", "/agents/agt_1/fork", `{}`, []error{agents.ErrNotFound, agents.ErrInvalidBoundary, sandbox.ErrLooser, sandbox.ErrUnavailable, limits.ErrLooser, limits.ErrInvalid, workspace.ErrUnavailable, workspace.ErrBusy, workspace.ErrDropped, workspace.ErrInvalid, workspace.ErrOverBudget, workspace.ErrCheckpointNotFound, workspace.ErrCheckpointCompacted, enospc, status.ErrAgentHomeUnavailable, status.ErrAgentStoreUnavailable, agents.ErrConflict}},
	{"POST", "/agents/{id}/spawn", "/agents/agt_1/spawn", `{}`, []error{agents.ErrNotFound, agents.ErrDepthExceeded, sandbox.ErrLooser, sandbox.ErrUnavailable, limits.ErrLooser, limits.ErrInvalid, workspace.ErrUnavailable, workspace.ErrBusy, workspace.ErrDropped, workspace.ErrInvalid, workspace.ErrOverBudget, workspace.ErrCheckpointNotFound, workspace.ErrCheckpointCompacted, enospc, status.ErrAgentHomeUnavailable, status.ErrAgentStoreUnavailable, agents.ErrConflict}},
	{"DELETE", "/agents/{id}/workspace", "/agents/agt_1/workspace", "", []error{agents.ErrNotFound, workspace.ErrNotFound, workspace.ErrBusy, status.ErrAgentStoreUnavailable}},
	{"GET", "/agents/{id}/workspace/changes", "/agents/agt_1/workspace/changes", "", []error{agents.ErrNotFound, workspace.ErrNotFound, workspace.ErrDropped, workspace.ErrUnavailable, status.ErrAgentStoreUnavailable}},
	{"GET", "/agents/{id}/checkpoints", "/agents/agt_1/checkpoints", "", []error{agents.ErrNotFound, workspace.ErrNotFound, workspace.ErrDropped, workspace.ErrUnavailable, status.ErrAgentStoreUnavailable}},
	{"GET", "/agents/{id}/checkpoints/diff", "/agents/agt_1/checkpoints/diff?from=call_1", "", []error{agents.ErrNotFound, workspace.ErrNotFound, workspace.ErrCheckpointNotFound, workspace.ErrCheckpointCompacted, workspace.ErrDropped, workspace.ErrInvalid, workspace.ErrUnavailable, status.ErrAgentStoreUnavailable}},
	{"POST", "/agents/{id}/rewind", "/agents/agt_1/rewind", `{"callId":"call_1"}`, []error{agents.ErrNotFound, workspace.ErrNotFound, workspace.ErrCheckpointNotFound, workspace.ErrCheckpointCompacted, workspace.ErrDropped, workspace.ErrBusy, workspace.ErrInvalid, workspace.ErrUnavailable, enospc, status.ErrAgentStoreUnavailable}},
	{"POST", "/agents/{id}/workspace/apply", "/agents/agt_1/workspace/apply", `{}`, []error{agents.ErrNotFound, workspace.ErrNotFound, workspace.ErrDropped, workspace.ErrBusy, &workspace.ConflictError{Paths: []string{"f"}}, workspace.ErrInvalid, workspace.ErrUnavailable, enospc, status.ErrAgentStoreUnavailable}},
	{"GET", "/agents/{id}/files/{path}", "/agents/agt_1/files/src/main.go", "", fileReadErrs},
	{"GET", "/agents/{id}/files/{path}", "/agents/agt_1/files/src?watch=true", "", []error{files.ErrWatchLimit}},
	{"PUT", "/agents/{id}/files/{path}", "/agents/agt_1/files/src/main.go", "x", fileWriteErrs},
	{"DELETE", "/agents/{id}/files/{path}", "/agents/agt_1/files/src", "", fileWriteErrs},
	{"POST", "/agents/{id}/files/{path}", "/agents/agt_1/files/src?op=mkdir", "", append(slices.Clip(fileWriteErrs), files.ErrExists)},
	{"POST", "/agents/{id}/files/{path}", "/agents/agt_1/files/src?op=move&to=dst", "", append(slices.Clip(fileWriteErrs), files.ErrExists, files.ErrCrossDevice)},
	{"GET", "/agents/{id}/archive/{path}", "/agents/agt_1/archive/src", "", fileReadErrs},
	{"PUT", "/agents/{id}/archive/{path}", "/agents/agt_1/archive/src", "x", append(slices.Clip(fileWriteErrs), files.ErrInvalidArchive)},
	{"GET", "/agents/{id}/transcript", "/agents/agt_1/transcript", "", []error{agents.ErrNotFound, status.ErrAgentStoreUnavailable}},
	{"POST", "/agents/{id}/tools/{name}", "/agents/agt_1/tools/bash", `{"arguments":{"command":"true"}}`,
		[]error{agents.ErrNotFound, tools.ErrUnknownTool, shellenv.ErrResolution, exec.ErrClosed, workspace.ErrDropped, workspace.ErrUnavailable, workspace.ErrOverBudget, enospc, status.ErrAgentHomeUnavailable, status.ErrAgentStoreUnavailable, agents.ErrConflict}},
	{"GET", "/tools", "/tools", "", nil},
	{"POST", "/exec", "/exec", `{"command":"true"}`,
		[]error{agents.ErrNotFound, tools.ErrInvalidArguments, shellenv.ErrResolution, &exec.TooManyJobsError{Limit: "global", Max: 1, RetryAfter: time.Second},
			exec.ErrInvalidCwd, exec.ErrManagedKeyInEnv, exec.ErrInvalidInput, exec.ErrTooLarge, exec.ErrTimeoutTooLong, exec.ErrClosed,
			exec.ErrIdempotencyKeyReused, exec.ErrIdempotencyKeyInUse, exec.ErrIdempotencyJobGone, sandbox.ErrLooser, sandbox.ErrUnavailable, limits.ErrLooser, limits.ErrInvalid, workspace.ErrDropped, workspace.ErrUnavailable, workspace.ErrOverBudget, enospc, status.ErrAgentHomeUnavailable, status.ErrClaimUnavailable, status.ErrOwnerUnavailable, status.ErrAgentStoreUnavailable, agents.ErrConflict}},
	{"GET", "/jobs", "/jobs?agentId=agt_1", "", []error{status.ErrAgentHomeUnavailable}},
	{"GET", "/jobs/{id}", "/jobs/job_1", "", []error{exec.ErrJobNotFound, status.ErrOwnerUnavailable}},
	{"DELETE", "/jobs/{id}", "/jobs/job_1", "", []error{exec.ErrJobNotFound, status.ErrOwnerUnavailable}},
	{"GET", "/jobs/{id}/output", "/jobs/job_1/output", "", []error{exec.ErrJobNotFound, status.ErrOwnerUnavailable}},
	{"POST", "/jobs/{id}/stdin", "/jobs/job_1/stdin", `{"data":"x"}`,
		[]error{exec.ErrJobNotFound, exec.ErrJobEnded, exec.ErrInputNotOpen, exec.ErrInputBlocked, status.ErrOwnerUnavailable}},
	{"POST", "/jobs/{id}/resize", "/jobs/job_1/resize", `{"cols":80,"rows":24}`,
		[]error{exec.ErrJobNotFound, exec.ErrJobEnded, exec.ErrNotTerminal, exec.ErrInvalidInput, status.ErrOwnerUnavailable}},
	{"POST", "/jobs/{id}/signal", "/jobs/job_1/signal", `{"signal":"SIGINT"}`,
		[]error{exec.ErrJobNotFound, exec.ErrJobEnded, exec.ErrSignalNotAllowed, status.ErrOwnerUnavailable}},
	{"GET", "/skills", "/skills", "", nil},
	{"GET", "/hooks", "/hooks", "", nil},
}

// do sends one request with the token and returns the status and the
// problem's code ("" when the answer is not a problem).
func do(t *testing.T, srv *httptest.Server, method, path, body string) (int, string) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, srv.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+testToken)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), problemContentType) {
		return resp.StatusCode, ""
	}
	var p struct{ Code string }
	if err := json.Unmarshal(b, &p); err != nil {
		t.Fatalf("%s %s: problem body %q: %v", method, path, b, err)
	}
	return resp.StatusCode, p.Code
}

// want returns the status and code the error table gives err.
func want(t *testing.T, err error) (int, string) {
	t.Helper()
	for _, e := range errorCodes {
		if errors.Is(err, e.err) {
			return e.status, e.code
		}
	}
	t.Fatalf("%v is in no row of the error table", err)
	return 0, ""
}

// TestDomainErrorsPerRoute drives every route over fakes returning each
// domain error its collaborators can return: one row per (route, error),
// checked against the error table's status and problem code.
func TestDomainErrorsPerRoute(t *testing.T) {
	srv, f := newFailingServer(t)
	for _, rt := range routes {
		for _, err := range rt.errs {
			t.Run(fmt.Sprintf("%s %s %v", rt.method, rt.pattern, err), func(t *testing.T) {
				f.err = fmt.Errorf("wrapped: %w", err)
				status, code := do(t, srv, rt.method, rt.path, rt.body)
				ws, wc := want(t, err)
				if status != ws || code != wc {
					t.Errorf("%s %s with %v = %d %q, want %d %q", rt.method, rt.path, err, status, code, ws, wc)
				}
			})
		}
	}
}

// TestErrorTableRowsAreReached fails when a row of the error table is
// reached by no route above (or by the HTTP layer's own tests below), so a
// new domain error must be given a route, and with it a contract check.
func TestErrorTableRowsAreReached(t *testing.T) {
	reached := map[string]bool{
		// The HTTP layer's own errors, driven by TestHTTPLayerErrors.
		"bad_request": true, "unauthorized": true, "not_found": true, "method_not_allowed": true,
		"body_too_large": true, "host_not_allowed": true,
		// body_timeout needs a client that stalls; TestBodyDeadline drives it.
		"body_timeout": true,
		// invalid_format: the contract's enum refuses an unknown format
		// first (bad_request); ListTools keeps the check for direct callers.
		"invalid_format": true,
		// The MCP endpoint is outside the contract: TestMCPSessionHome.
		"session_home_unavailable": true,
		// The forwarder's refusal of a request that says a replica sent
		// it, on any route (each declares 421): TestForwardAdmission.
		"forward_refused": true,
	}
	for _, rt := range routes {
		for _, err := range rt.errs {
			_, code := want(t, err)
			reached[code] = true
		}
	}
	for _, e := range errorCodes {
		if !reached[e.code] {
			t.Errorf("error table row %s (%d) is reached by no route of the table", e.code, e.status)
		}
	}
}

// TestMCPSessionHome: a request of an MCP session whose replica is gone is
// answered 503 session_home_unavailable as a problem. (tests/ drives the
// routing itself through real replicas: TestClusterMCP.)
func TestMCPSessionHome(t *testing.T) {
	srv, f := newFailingServer(t)
	f.err = status.ErrSessionHomeUnavailable
	for _, tc := range []struct {
		session string
		status  int
		code    string
	}{
		{"mcp_replica-b.0123456789abcdef", 503, "session_home_unavailable"},
	} {
		req, _ := http.NewRequest("POST", srv.URL+"/mcp", strings.NewReader(`{}`))
		req.Header.Set("Authorization", "Bearer "+testToken)
		req.Header.Set("Content-Type", "application/json")
		if tc.session != "" {
			req.Header.Set("Mcp-Session-Id", tc.session)
		}
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var p struct{ Code string }
		_ = json.NewDecoder(resp.Body).Decode(&p)
		resp.Body.Close()
		if resp.StatusCode != tc.status || p.Code != tc.code {
			t.Errorf("session %q: %d %q, want %d %q", tc.session, resp.StatusCode, p.Code, tc.status, tc.code)
		}
	}
}

// TestHTTPLayerErrors covers the rows the HTTP layer raises itself, and
// the MCP endpoint's refusal.
func TestHTTPLayerErrors(t *testing.T) {
	srv, f := newFailingServer(t)
	f.err = mcp.ErrAgentConflict
	send := func(method, path, body, token, host string) (int, string) {
		req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		if host != "" {
			req.Host = host
		}
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var p struct{ Code string }
		_ = json.NewDecoder(resp.Body).Decode(&p)
		return resp.StatusCode, p.Code
	}
	tests := []struct {
		name                    string
		method, path, body, tok string
		host                    string
		status                  int
		code                    string
	}{
		{"no token", "POST", "/exec", `{"command":"true"}`, "", "", 401, "unauthorized"},
		{"wrong token", "GET", "/jobs", "", "wrong", "", 401, "unauthorized"},
		{"contract refuses the body", "POST", "/exec", `{"command":1}`, testToken, "", 400, "bad_request"},
		{"unknown format", "GET", "/tools?format=yaml", "", testToken, "", 400, "bad_request"},
		{"body too large", "POST", "/exec", `{"command":"` + strings.Repeat("x", 5000) + `"}`, testToken, "", 413, "body_too_large"},
		{"foreign host", "GET", "/jobs", "", testToken, "rebind.example", 421, "host_not_allowed"},
		{"no such route", "GET", "/nowhere", "", testToken, "", 404, "not_found"},
		{"method not allowed", "PUT", "/jobs", "", testToken, "", 405, "method_not_allowed"},
		{"method not allowed, path parameter", "PUT", "/jobs/job_1", "", testToken, "", 405, "method_not_allowed"},
		{"path parameter the contract refuses", "GET", "/jobs/" + strings.Repeat("j", 129), "", testToken, "", 400, "bad_request"},
		{"second path parameter the contract refuses", "POST", "/agents/agt_1/tools/" + strings.Repeat("t", 129), `{"arguments":{}}`, testToken, "", 400, "bad_request"},
		{"MCP agent conflict", "POST", "/mcp", `{}`, testToken, "", 400, "bad_request"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, code := send(tt.method, tt.path, tt.body, tt.tok, tt.host)
			if status != tt.status || code != tt.code {
				t.Errorf("%s %s = %d %q, want %d %q", tt.method, tt.path, status, code, tt.status, tt.code)
			}
		})
	}
}

// TestContractDeclaresEveryStatus fails when a route can answer a status its
// contract entry does not declare explicitly (a "default" response does not
// count, except for 500): every domain error of the route, what every
// protected route can answer (401, 421) and what every route with a body can
// answer (400, 408, 413). It also fails when the contract has an operation
// the table above does not list.
func TestContractDeclaresEveryStatus(t *testing.T) {
	doc, err := openapi3.NewLoader().LoadFromData(contract.OpenAPI)
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]bool{}
	for _, rt := range routes {
		key := rt.method + " " + rt.pattern
		listed[key] = true
		item := doc.Paths.Find(rt.pattern)
		if item == nil {
			t.Errorf("%s: not in the contract", key)
			continue
		}
		op := item.GetOperation(rt.method)
		if op == nil {
			t.Errorf("%s: not in the contract", key)
			continue
		}
		statuses := map[int]string{421: "any request (Host check)"}
		if protected := op.Security == nil || len(*op.Security) > 0; protected && len(doc.Security) > 0 {
			statuses[401] = "the token check"
		}
		if op.RequestBody != nil {
			statuses[400] = "a body the contract refuses"
			statuses[408] = "a body not sent in time"
			statuses[413] = "a body too large"
		}
		for _, e := range rt.errs {
			status, code := want(t, e)
			statuses[status] = code
		}
		var missing []string
		for status, why := range statuses {
			if op.Responses.Value(strconv.Itoa(status)) == nil && status != 500 {
				missing = append(missing, fmt.Sprintf("%d (%s)", status, why))
			}
		}
		sort.Strings(missing)
		if len(missing) > 0 {
			t.Errorf("%s can answer %s, which its contract entry does not declare", key, strings.Join(missing, ", "))
		}
	}
	for path, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			if !listed[method+" "+path] {
				t.Errorf("%s %s is in the contract but not in the route table of this test", method, path)
			}
		}
	}
}
