// Package httpapi is dshd's HTTP face. It only translates: generated strict
// handlers (internal/http/api) decode and validate requests against the
// embedded contract, this package converts them to domain inputs, calls the
// domain and converts the results back. Every error leaves as problem+json.
//
// Floor 7 of the layout (docs/design.md#floors): it imports only packages on the floors below.
package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"mime"
	"net/http"
	"path"
	"strings"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.yaml.in/yaml/v3"

	"github.com/dshd/dshd/internal/agents"
	"github.com/dshd/dshd/internal/cluster/status"
	"github.com/dshd/dshd/internal/exec"
	"github.com/dshd/dshd/internal/files"
	"github.com/dshd/dshd/internal/hooks"
	"github.com/dshd/dshd/internal/http/api"
	"github.com/dshd/dshd/internal/ids"
	"github.com/dshd/dshd/internal/mcp"
	"github.com/dshd/dshd/internal/run"
	"github.com/dshd/dshd/internal/sandbox"
	"github.com/dshd/dshd/internal/shellenv"
	"github.com/dshd/dshd/internal/skills"
	"github.com/dshd/dshd/internal/uiauth"
	"github.com/dshd/dshd/internal/workspace"
)

// envRegistry is what the handlers need of the managed-environment registry.
type envRegistry interface {
	Register(ctx context.Context, s shellenv.Spec) (shellenv.Contributor, error)
	Unregister(ctx context.Context, name string) error
	Contributor(name string) (shellenv.Contributor, error)
	Contributors() []shellenv.Contributor
	Declarations() []shellenv.Declaration
	OpenPlugin(ctx context.Context, name string, lease time.Duration) (shellenv.Plugin, error)
	Plugin(id string) (shellenv.Plugin, error)
	Plugins() []shellenv.Plugin
	RenewPlugin(ctx context.Context, id string, lease time.Duration) (shellenv.Plugin, error)
	ClosePlugin(ctx context.Context, id string) error
}

// jobService is what the handlers need of the executor.
type jobService interface {
	Job(id string) (*exec.Job, error)
	Jobs(agentID string, state exec.State) []exec.Snapshot
	Cancel(ctx context.Context, id string) (exec.Snapshot, error)
	WriteInput(ctx context.Context, id string, data []byte, closeInput bool) (exec.Snapshot, error)
	Resize(id string, cols, rows int) (exec.Snapshot, error)
	Signal(id, name string) (exec.Snapshot, error)
}

// pipeline runs executions (harness commands and model tool calls) and
// starts sessions, so their hooks run.
type pipeline interface {
	Exec(ctx context.Context, r run.ExecRequest) (*exec.Job, error)
	Call(ctx context.Context, agentID, name, callID string, args json.RawMessage) (run.CallResult, error)
	CreateAgent(ctx context.Context, cwd string, b agents.Bounds) (run.Session, error)
	ResumeAgent(ctx context.Context, id string) (run.Session, error)
	ForkAgent(ctx context.Context, id string, boundary *int64, b agents.Bounds, mode workspace.Mode) (run.Session, error)
	SpawnAgent(ctx context.Context, id string, b agents.Bounds, mode workspace.Mode) (run.Session, error)
	CreateAgentIn(ctx context.Context, cwd string, b agents.Bounds, mode workspace.Mode) (run.Session, error)
	ForkAgentFrom(ctx context.Context, id, callID string, b agents.Bounds) (run.Session, error)
	SpawnAgentFrom(ctx context.Context, id, callID string, b agents.Bounds) (run.Session, error)
	Checkpoints(ctx context.Context, agent string, diff bool) ([]run.CheckpointInfo, workspace.CheckpointList, error)
	CheckpointDiff(ctx context.Context, agent, from, to string, diff bool) ([]workspace.Change, error)
	Rewind(ctx context.Context, agent, callID string, after, undo bool) (int, error)
}

// agentService is what the handlers read of agent sessions.
type agentService interface {
	Get(ctx context.Context, id string) (agents.Agent, error)
	List(ctx context.Context) ([]agents.Agent, error)
	Transcript(ctx context.Context, id string) ([]byte, error)
}

// containmentReporter says how jobs are contained on this host.
type containmentReporter interface {
	Containment() exec.ContainmentInfo
}

// sandboxReporter says which sandbox policies this host can enforce, and
// the server default.
type sandboxReporter interface {
	Support() sandbox.Support
	Default() sandbox.Policy
}

// clusterReporter reports this replica's view of its cluster (cluster
// mode only).
type clusterReporter interface {
	Status() status.Status
}

// mcpEndpoint serves the MCP endpoint (*mcp.Handler). ServeMCP returns an
// error, having written nothing, when the request cannot be served; the
// server's error writer answers it.
type mcpEndpoint interface {
	ServeMCP(w http.ResponseWriter, r *http.Request) error
}

// hookLister lists configured hooks.
type hookLister interface {
	Handlers() []hooks.Handler
}

// skillLister lists local skills.
type skillLister interface {
	List(ctx context.Context) ([]skills.Skill, error)
}

var (
	_ envRegistry         = (*shellenv.Registry)(nil)
	_ jobService          = (*exec.Executor)(nil)
	_ containmentReporter = (*exec.Executor)(nil)
	_ pipeline            = (*run.Service)(nil)
	_ hookLister          = (*hooks.Config)(nil)
	_ skillLister         = (*skills.Dir)(nil)
	_ agentService        = (*agents.Store)(nil)
	_ mcpEndpoint         = (*mcp.Handler)(nil)

	_ api.StrictServerInterface = (*Server)(nil)
)

// Deps are the server's collaborators and settings.
type Deps struct {
	Logger   *slog.Logger
	Token    string // the bearer token every protected route needs
	Env      envRegistry
	Jobs     jobService
	Pipeline pipeline
	Agents   agentService
	Hooks    hookLister
	Skills   skillLister
	// Containment is reported in GET /healthz details; nil reports none.
	Containment containmentReporter
	// Sandbox is reported in GET /healthz details; nil reports none.
	Sandbox sandboxReporter
	// Cluster is reported in GET /healthz details; nil (dshd runs alone)
	// reports none.
	Cluster clusterReporter
	// Workspaces serves the agents' snapshot workspaces (and is reported
	// in GET /healthz details); nil serves none.
	Workspaces workspaceService
	// JobRouter, in cluster mode, says which replica runs a job; requests
	// for another replica's job are forwarded to it (see newForwarder).
	// ReplicaID names this replica on forwarded requests.
	JobRouter jobRouter
	ReplicaID string
	// PeerKey signs the requests replicas send each other (see
	// verifyPeer); nil derives it from Token (PeerKeyFromToken).
	PeerKey []byte
	// Gatherer serves /metrics; Registerer takes the HTTP metrics. Both may be nil.
	Gatherer   prometheus.Gatherer
	Registerer prometheus.Registerer
	Spec       []byte // the OpenAPI contract, served and validated against
	UI         fs.FS  // static files served under /ui/; nil serves none
	// Logins keeps the UI's login codes and sessions; nil makes a store
	// with the defaults (uiauth.New).
	Logins uiLogins
	// MCP serves /mcp, behind the token but outside the contract's
	// validator (its messages are JSON-RPC); nil serves none.
	MCP mcpEndpoint
	// MaxBodyBytes caps request bodies (default 1 MiB).
	MaxBodyBytes int64
	// Files serves the file routes (/agents/{id}/files/…, /archive/…);
	// nil serves none. MaxUploadBytes caps their uploads (default 1 GiB);
	// Spool is the directory a tar stream is spooled to before it is
	// unpacked ("" the system's temporary directory).
	Files          fileService
	MaxUploadBytes int64
	Spool          string
	// Watches keeps the live watches of the files route (?watch=true);
	// nil makes a set of its own, each watch kept a minute after its last
	// client leaves.
	Watches *files.Watches
	// Hosts are the Host names and addresses requests may give besides
	// localhost and loopback addresses (the address of a remote listener).
	Hosts []string
	// AnyHost accepts every Host: for a Unix socket, which no browser reaches.
	AnyHost bool
	// BodyTimeout bounds the time a client may take to send a request body,
	// from the end of its headers (default 30s).
	BodyTimeout time.Duration
	// KeepAlive is the interval of SSE keep-alive comments (default 15s).
	KeepAlive time.Duration
}

// Server implements the generated strict server interface.
type Server struct {
	logger      *slog.Logger
	token       []byte
	logins      uiLogins
	env         envRegistry
	jobs        jobService
	containment containmentReporter
	sandbox     sandboxReporter
	cluster     clusterReporter
	workspaces  workspaceService
	pipeline    pipeline
	agents      agentService
	hooks       hookLister
	skills      skillLister
	spec        []byte
	hosts       []string
	anyHost     bool
	maxBody     int64
	files       fileService
	maxUpload   int64
	spool       string
	watches     *files.Watches
	bodyTimeout time.Duration
	keepAlive   time.Duration
	metrics     *httpMetrics
	ids         *ids.Source
	router      *chi.Mux
	// peers, in cluster mode, asks the other replicas for their lists.
	peers *peerLister
}

// mcpPath is where the MCP endpoint is mounted.
const mcpPath = "/mcp"

// NewServer builds the HTTP handler. It returns an error when the contract
// does not load or the token is empty.
func NewServer(d Deps) (http.Handler, error) {
	if d.Token == "" {
		return nil, errors.New("http: empty token")
	}
	s := newServer(d)
	doc, err := loadContract(d.Spec)
	if err != nil {
		return nil, err
	}
	r := chi.NewRouter()
	s.router = r
	if err := s.useMiddleware(r, d, doc); err != nil {
		return nil, err
	}
	r.NotFound(func(w http.ResponseWriter, r *http.Request) { s.writeError(w, r, errNotFound) })
	r.MethodNotAllowed(func(w http.ResponseWriter, r *http.Request) { s.writeError(w, r, errMethodNotAllowed) })
	if err := s.mountOutsideContract(r, d); err != nil {
		return nil, err
	}
	strict := api.NewStrictHandlerWithOptions(s, []api.StrictMiddlewareFunc{keepAccept}, api.StrictHTTPServerOptions{
		RequestErrorHandlerFunc: func(w http.ResponseWriter, r *http.Request, err error) {
			s.writeError(w, r, fmt.Errorf("%w: %v", errBadRequest, err))
		},
		ResponseErrorHandlerFunc: s.writeError,
	})
	return api.HandlerWithOptions(strict, api.ChiServerOptions{
		BaseRouter: r,
		ErrorHandlerFunc: func(w http.ResponseWriter, r *http.Request, err error) {
			s.writeError(w, r, fmt.Errorf("%w: %v", errBadRequest, err))
		},
	}), nil
}

// newServer is the Server of d, with the defaults of what d leaves out.
func newServer(d Deps) *Server {
	s := &Server{
		logger:      d.Logger,
		token:       []byte(d.Token),
		logins:      d.Logins,
		env:         d.Env,
		jobs:        d.Jobs,
		containment: d.Containment,
		sandbox:     d.Sandbox,
		cluster:     d.Cluster,
		workspaces:  d.Workspaces,
		pipeline:    d.Pipeline,
		agents:      d.Agents,
		hooks:       d.Hooks,
		skills:      d.Skills,
		spec:        d.Spec,
		anyHost:     d.AnyHost,
		maxBody:     d.MaxBodyBytes,
		files:       d.Files,
		maxUpload:   d.MaxUploadBytes,
		spool:       d.Spool,
		watches:     d.Watches,
		bodyTimeout: d.BodyTimeout,
		keepAlive:   d.KeepAlive,
		metrics:     newHTTPMetrics(d.Registerer),
		ids:         ids.NewSource(nil),
	}
	if s.logger == nil {
		s.logger = slog.New(slog.DiscardHandler)
	}
	if s.logins == nil {
		s.logins = uiauth.New(uiauth.Options{})
	}
	if s.maxBody <= 0 {
		s.maxBody = 1 << 20
	}
	if s.maxUpload <= 0 {
		s.maxUpload = DefaultMaxUploadBytes
	}
	for _, h := range d.Hosts {
		s.hosts = append(s.hosts, normalizeHost(h))
	}
	if s.bodyTimeout <= 0 {
		s.bodyTimeout = 30 * time.Second
	}
	if s.keepAlive <= 0 {
		s.keepAlive = 15 * time.Second
	}
	if s.watches == nil {
		s.watches = files.NewWatches(0)
	}
	return s
}

// loadContract loads and validates the contract, as the request validator
// uses it.
func loadContract(spec []byte) (*openapi3.T, error) {
	doc, err := openapi3.NewLoader().LoadFromData(spec)
	if err != nil {
		return nil, fmt.Errorf("load contract: %w", err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		return nil, fmt.Errorf("validate contract: %w", err)
	}
	// Host validation would reject requests to any address but the spec's servers.
	doc.Servers = nil
	if err := leaveCommandLengthToExecutor(doc); err != nil {
		return nil, err
	}
	leaveSecurityToAuthenticate(doc)
	return doc, nil
}

// useMiddleware puts every request through the middleware, in order: stage
// timing, deadlines and framing, request ids and metrics, the Host check,
// the security headers, authentication, forwarding to another replica
// (cluster mode), the body limit, and validation against doc.
func (s *Server) useMiddleware(r *chi.Mux, d Deps, doc *openapi3.T) error {
	validator, err := newContractValidator(doc, r, &openapi3filter.Options{
		// None is called (leaveSecurityToAuthenticate); the validator
		// wants one all the same.
		AuthenticationFunc: openapi3filter.NoopAuthenticationFunc,
	}, func(r *http.Request) bool {
		// The UI's files are not in the contract; its sign-in routes are.
		// The file routes check their own parameters (their {path} holds
		// slashes, which the contract's router cannot match).
		return (isUI(r.URL.Path) && r.Method != http.MethodPost && r.Method != http.MethodDelete) || r.URL.Path == mcpPath || isFilesPath(r.URL.Path)
	}, s.writeError)
	if err != nil {
		return err
	}
	mws := []func(http.Handler) http.Handler{timeStages, s.bodyDeadline, s.closeChunked, s.requestID, s.observe, s.checkHost, s.secureHeaders, s.authenticate}
	if d.JobRouter != nil {
		peerKey := d.PeerKey
		if len(peerKey) == 0 {
			peerKey = PeerKeyFromToken(d.Token)
		}
		mws = append(mws, s.newForwarder(d.JobRouter, d.ReplicaID, peerKey))
		if d.Cluster != nil {
			s.peers = newPeerLister(d.Cluster, d.ReplicaID, d.Token, peerKey)
		}
	}
	r.Use(append(mws, s.limitBody, validator.handler)...)
	return nil
}

// mountOutsideContract mounts the routes the generated handler does not
// serve: the contract itself, the metrics, the UI's files and sign-in, and
// the MCP endpoint.
func (s *Server) mountOutsideContract(r chi.Router, d Deps) error {
	specJSON, err := yamlToJSON(d.Spec)
	if err != nil {
		return fmt.Errorf("contract as JSON: %w", err)
	}
	r.Get("/openapi.json", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(specJSON)
	})
	r.Get("/openapi.yaml", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/yaml")
		_, _ = w.Write(s.spec)
	})
	if d.Gatherer != nil {
		r.Method(http.MethodGet, "/metrics", promhttp.HandlerFor(d.Gatherer, promhttp.HandlerOpts{}))
	}
	if d.UI != nil {
		r.Get("/", func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, "/ui/", http.StatusFound)
		})
		r.Get("/ui", func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, "/ui/", http.StatusMovedPermanently)
		})
		r.Post(loginCodesPath, s.createLoginCode)
		r.Post(uiSessionPath, s.createUISession)
		r.Delete(uiSessionPath, s.deleteUISession)
		files := http.StripPrefix("/ui/", http.FileServerFS(d.UI))
		r.Get("/ui/*", func(w http.ResponseWriter, r *http.Request) {
			if !hasUIFile(d.UI, strings.TrimPrefix(r.URL.Path, "/ui/")) {
				s.writeError(w, r, errNotFound)
				return
			}
			files.ServeHTTP(w, r)
		})
	}
	if d.Files != nil {
		s.mountFiles(r)
	}
	if d.MCP != nil {
		r.HandleFunc(mcpPath, func(w http.ResponseWriter, r *http.Request) {
			if err := d.MCP.ServeMCP(w, r); err != nil {
				s.writeError(w, r, err)
			}
		})
	}
	return nil
}

// hasUIFile reports whether name is a file of the UI, or a directory with an
// index.html, so that everything else is the server's problem+json 404
// rather than the file server's text one (or a directory listing).
func hasUIFile(ui fs.FS, name string) bool {
	name = strings.Trim(path.Clean("/"+name), "/")
	if name == "" {
		name = "."
	}
	fi, err := fs.Stat(ui, name)
	if err != nil {
		return false
	}
	if fi.IsDir() {
		_, err = fs.Stat(ui, path.Join(name, "index.html"))
		return err == nil
	}
	return true
}

// yamlToJSON converts the YAML contract to JSON.
func yamlToJSON(b []byte) ([]byte, error) {
	var v any
	if err := yaml.Unmarshal(b, &v); err != nil {
		return nil, err
	}
	return json.Marshal(v)
}

// keepAccept puts the request's Accept header in the context of the
// operations that answer in more than one media type.
func keepAccept(f api.StrictHandlerFunc, operationID string) api.StrictHandlerFunc {
	if operationID != "GetTranscript" {
		return f
	}
	return func(ctx context.Context, w http.ResponseWriter, r *http.Request, req any) (any, error) {
		return f(context.WithValue(ctx, acceptKey, r.Header.Get("Accept")), w, r, req)
	}
}

// acceptFrom returns the Accept header kept by keepAccept.
func acceptFrom(ctx context.Context) string {
	a, _ := ctx.Value(acceptKey).(string)
	return a
}

// wantsJSON reports whether an Accept header asks for application/json
// (and not for the stored JSONL, which wins a tie).
func wantsJSON(accept string) bool {
	for part := range strings.SplitSeq(accept, ",") {
		mt, _, err := mime.ParseMediaType(strings.TrimSpace(part))
		if err != nil {
			continue
		}
		switch mt {
		case "application/x-ndjson", "application/jsonl":
			return false
		case "application/json":
			return true
		}
	}
	return false
}

// leaveCommandLengthToExecutor takes the maxLength off ExecRequest.command
// in the validator's copy of the contract. The contract keeps it for
// generators: it counts characters, and a command over it is over the
// kernel's limit too. The kernel counts bytes, and the executor answers
// every command over them with 413 argument_too_large; left to the
// validator, an ASCII command just over the limit would be 400 and one of
// multi-byte characters 413, for the same fault.
func leaveCommandLengthToExecutor(doc *openapi3.T) error {
	req := doc.Components.Schemas["ExecRequest"]
	if req == nil || req.Value == nil || req.Value.Properties["command"] == nil || req.Value.Properties["command"].Value == nil {
		return errors.New("load contract: ExecRequest.command is missing")
	}
	// The schema is shared by reference; a copy keeps the loaded
	// document's other users (none today) unaffected.
	cmd := *req.Value.Properties["command"].Value
	cmd.MaxLength = nil
	req.Value.Properties["command"] = openapi3.NewSchemaRef("", &cmd)
	return nil
}
