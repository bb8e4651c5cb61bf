// Command dshd runs dshd: an HTTP service that runs bash commands for AI
// agent harnesses, each with a trusted environment of managed DSH_* facts.
//
// Floor 8 of the layout (docs/design.md#floors): it imports only packages on the floors below.
package main

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	contract "github.com/dshd/dshd/api"
	"github.com/dshd/dshd/internal/agents"
	"github.com/dshd/dshd/internal/atomicfile"
	"github.com/dshd/dshd/internal/cluster"
	"github.com/dshd/dshd/internal/cluster/status"
	"github.com/dshd/dshd/internal/exec"
	"github.com/dshd/dshd/internal/homefs"
	"github.com/dshd/dshd/internal/hooks"
	httpapi "github.com/dshd/dshd/internal/http"
	"github.com/dshd/dshd/internal/ids"
	"github.com/dshd/dshd/internal/mcp"
	"github.com/dshd/dshd/internal/netallow"
	pipe "github.com/dshd/dshd/internal/run"
	"github.com/dshd/dshd/internal/sandbox"
	"github.com/dshd/dshd/internal/shellenv"
	"github.com/dshd/dshd/internal/skills"
	"github.com/dshd/dshd/internal/uiauth"
	"github.com/dshd/dshd/internal/workspace"
	"github.com/dshd/dshd/web"
)

func main() {
	// Before anything is started: a descriptor dshd inherited open across
	// exec must not reach its jobs and hooks.
	exec.CloseInheritedOnExec()
	if err := run(context.Background(), os.Args, os.Getenv, os.Stdin, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintf(os.Stderr, "dshd: %v\n", err)
		os.Exit(1)
	}
}

// MCP session defaults. Each open session holds a server, goroutines and
// buffers; its agent outlives it, and a client that names the agent again
// continues as it.
const (
	mcpMaxSessions = 256
	mcpIdleTimeout = 30 * time.Minute
)

// options are the command-line flags.
type options struct {
	addr        string
	home        string
	config      string
	tokenFile   string
	allowRemote bool
	logLevel    slog.Level
	version     bool
}

// errExit ends run successfully before serving: --help and --version.
var errExit = errors.New("nothing to serve")

const usageHead = `Usage: dshd [flags]
       dshd ui [flags]   print a one-time login URL of the running server's UI

dshd runs bash commands for agent harnesses over HTTP/JSON, each with a
trusted environment of managed DSH_* facts. The contract is served at
/openapi.yaml; the startup line says where the token is. The token is never
printed: open the UI with the URL "dshd ui" prints.

Flags:
`

// parseFlags reads the flags. --help prints the usage on stdout and
// --version the build information; both return errExit. A bad flag
// prints the error and the usage on stderr.
func parseFlags(args []string, stdout, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("dshd", flag.ContinueOnError)
	// Parse errors are reported below, with the usage on the right stream.
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	fs.StringVar(&o.addr, "addr", "127.0.0.1:7433", "listen address: host:port, or unix:/path for a Unix socket")
	fs.StringVar(&o.home, "home", "", "harness home (default: config dshHome, else $DSH_HOME, else ~/.dsh)")
	fs.StringVar(&o.config, "config", "", "configuration file (YAML or JSON)")
	fs.StringVar(&o.tokenFile, "token-file", "", "file holding the bearer token (default: generated into <home>/server.token)")
	fs.BoolVar(&o.allowRemote, "allow-remote", false, "allow listening on a non-loopback address")
	fs.TextVar(&o.logLevel, "log-level", slog.LevelInfo, "log level: debug, info, warn or error")
	fs.BoolVar(&o.version, "version", false, "print the version and build information, then exit")
	usage := func(w io.Writer) {
		fmt.Fprint(w, usageHead)
		fs.SetOutput(w)
		fs.PrintDefaults()
		fs.SetOutput(io.Discard)
	}
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			usage(stdout)
			return o, errExit
		}
		usage(stderr) // run's caller prints err itself
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	if o.version {
		fmt.Fprintln(stdout, versionLine())
		return o, errExit
	}
	return o, nil
}

// versionLine describes the running binary from its build information:
// the module version (a tag under go install module@version, "(devel)" in
// a checkout) and, when built from a checkout, the VCS revision and time.
func versionLine() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "dshd (no build information)"
	}
	version := bi.Main.Version
	if version == "" {
		version = "(devel)"
	}
	line := fmt.Sprintf("dshd %s %s", version, bi.GoVersion)
	var rev, at, modified string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			at = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				modified = " (modified)"
			}
		}
	}
	if rev != "" {
		line += " revision " + rev + modified
		if at != "" {
			line += " " + at
		}
	}
	return line + " " + runtime.GOOS + "/" + runtime.GOARCH
}

// run is the whole program: it serves until ctx ends or SIGINT/SIGTERM
// arrives, then shuts down HTTP, then the jobs, then the sessions.
// getenv answers dshd's own settings ($DSH_HOME, $HOME); commands inherit
// the process environment, filtered by the env policy.
func run(ctx context.Context, args []string, getenv func(string) string, _ io.Reader, stdout, stderr io.Writer) error {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()

	if len(args) > 1 && args[1] == "ui" {
		return runUI(ctx, args[2:], getenv, stdout, stderr)
	}
	o, cfg, err := configure(args, stdout, stderr)
	if errors.Is(err, errExit) {
		return nil
	}
	if err != nil {
		return err
	}

	home, token, tokenPath, err := openHome(o, cfg, getenv)
	if err != nil {
		return err
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: o.logLevel, ReplaceAttr: redactToken(token)}))
	ln, hosts, anyHost, err := listenAs(o)
	if err != nil {
		return err
	}
	defer ln.Close()

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	svc, err := newServices(ctx, cfg, home, token, tokenPath, logger, reg)
	if err != nil {
		return err
	}
	defer svc.sessions.Close()
	defer svc.workspaces.Close()
	budgetCtx, stopBudget := context.WithCancel(ctx)
	defer stopBudget()
	go svc.workspaces.WatchBudget(budgetCtx, func(ids []string) { stopWriters(budgetCtx, svc.executor, logger, ids) })
	defer svc.leaveCluster()
	handler, err := newHandler(svc, cfg, home, token, hosts, anyHost, logger, reg)
	if err != nil {
		return err
	}

	leaseCtx, stopLeases := context.WithCancel(context.Background())
	defer stopLeases()
	go svc.env.Run(leaseCtx)

	// Requests run under reqCtx, which shutdown cancels: long-polls and
	// output streams then end instead of holding the shutdown open.
	reqCtx, cancelRequests := context.WithCancel(context.Background())
	defer cancelRequests()
	srv := newHTTPServer(handler, cfg, logger, reqCtx)
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()

	base := baseURL(ln)
	if svc.node != nil {
		if err := svc.node.StartHeartbeats(base, svc.env.Revision); err != nil {
			return err
		}
	}
	budget := announce(stdout, logger, cfg, base, home, tokenPath)

	select {
	case <-ctx.Done():
	case err := <-serveErr:
		return fmt.Errorf("serve: %w", err)
	}
	logger.Info("shutting down", "budget", budget)
	return shutdown(srv, svc, budget, cancelRequests, stopLeases)
}

// configure parses the flags, then loads the configuration they name.
// errExit: the flags asked for help or the version, printed already.
func configure(args []string, stdout, stderr io.Writer) (options, config, error) {
	o, err := parseFlags(args, stdout, stderr)
	if err != nil {
		return o, config{}, err
	}
	cfg, err := loadConfig(o.config)
	return o, cfg, err
}

// announce prints where dshd listens and logs its start; it returns the
// shutdown budget.
func announce(stdout io.Writer, logger *slog.Logger, cfg config, base, home, tokenPath string) time.Duration {
	// The token is never printed: whatever keeps dshd's output (a terminal's
	// scrollback, journald, a log file) may be readable by commands. The UI
	// is opened with a one-time login URL: dshd ui.
	fmt.Fprintf(stdout, "dshd listening on %s (home %s, token in %s) ui %s\n",
		base, home, tokenPath, uiURL(base))
	// The shutdown budget covers the jobs' grace: every job gets its
	// SIGTERM, the whole grace, then SIGKILL, before dshd exits.
	budget := shutdownBudget(ms(cfg.Jobs.GraceMs))
	logger.Info("started", "addr", base, "home", home, "shutdown_budget", budget)
	return budget
}

// openHome resolves the home (docs/design.md#invariants, invariant 10),
// makes it safe to use, and reads or makes the token.
func openHome(o options, cfg config, getenv func(string) string) (home, token, tokenPath string, err error) {
	if home, err = resolveHome(o, cfg, getenv); err != nil {
		return "", "", "", err
	}
	if err := ensureHome(home); err != nil {
		return "", "", "", err
	}
	if token, tokenPath, err = loadToken(home, o.tokenFile); err != nil {
		return "", "", "", err
	}
	return home, token, tokenPath, nil
}

// listenAs listens where o says, and returns the Host values requests may
// carry there (any, with anyHost).
func listenAs(o options) (ln net.Listener, hosts []string, anyHost bool, err error) {
	if ln, err = listen(o.addr, o.allowRemote); err != nil {
		return nil, nil, false, err
	}
	if hosts, anyHost, err = allowedHosts(o.addr, o.allowRemote); err != nil {
		ln.Close()
		return nil, nil, false, err
	}
	return ln, hosts, anyHost, nil
}

// newHandler builds the HTTP handler over svc: the routes, the UI, the
// metrics of reg and, in cluster mode, forwarding to the other replicas.
func newHandler(svc *services, cfg config, home, token string, hosts []string, anyHost bool, logger *slog.Logger, reg *prometheus.Registry) (http.Handler, error) {
	deps := httpapi.Deps{
		Logger:         logger.With("component", "http"),
		Token:          token,
		Logins:         uiauth.New(uiauth.Options{}),
		Env:            svc.env,
		Jobs:           svc.executor,
		Pipeline:       svc.pipeline,
		Agents:         svc.sessions,
		Hooks:          svc.hooks,
		Skills:         skills.New(home),
		Containment:    svc.executor,
		Sandbox:        sandboxReport{svc.sandbox, svc.policy},
		Workspaces:     svc.workspaces,
		Gatherer:       reg,
		Registerer:     reg,
		Spec:           contract.OpenAPI,
		UI:             web.FS(),
		MCP:            svc.mcp,
		MaxBodyBytes:   cfg.HTTP.MaxBodyBytes,
		Files:          svc.pipeline,
		MaxUploadBytes: cfg.Files.MaxUploadBytes,
		Spool:          home,
		BodyTimeout:    ms(cfg.HTTP.BodyTimeoutMs),
		Hosts:          hosts,
		AnyHost:        anyHost,
	}
	if svc.node != nil {
		deps.Cluster, deps.JobRouter, deps.ReplicaID = svc.node, svc.node, svc.node.ReplicaID()
		var err error
		if deps.PeerKey, err = cfg.Cluster.peerKey(); err != nil {
			return nil, err
		}
	}
	return httpapi.NewServer(deps)
}

// services are the domain services one dshd runs, wired together.
type services struct {
	executor *exec.Executor
	env      *shellenv.Registry
	sessions *agents.Store
	hooks    *hooks.Config
	pipeline *pipe.Service
	mcp      *mcp.Handler
	sandbox  *sandbox.Host
	policy   sandbox.Policy // the default sandbox policy
	// workspaces keeps the agents' snapshot workspaces.
	workspaces *workspace.Manager

	// Cluster mode only (nil otherwise): the NATS connection, and what
	// stops following the shared registry.
	node        *cluster.Node
	stopCluster context.CancelFunc
}

// leaveCluster stops following the cluster and closes the NATS
// connection; it does nothing when dshd runs alone, or the second time.
func (s *services) leaveCluster() {
	if s.node == nil {
		return
	}
	s.stopCluster()
	s.node.Close()
	s.node = nil
}

// clusterReadyTimeout bounds the first read of the shared registry.
const clusterReadyTimeout = time.Minute

// newRegistry builds the registry: kept in <home>/contributors.json when
// dshd runs alone, or, when the configuration has a cluster section,
// shared through the cluster's registry bucket, followed until
// stopCluster and read once before it returns (node is nil when dshd
// runs alone: no connection is made then).
func newRegistry(ctx context.Context, cfg config, home string, logger *slog.Logger, reg prometheus.Registerer) (env *shellenv.Registry, node *cluster.Node, stopCluster context.CancelFunc, err error) {
	opts := shellenv.Options{
		Home:           home,
		StatePath:      filepath.Join(home, "contributors.json"),
		WebhookTimeout: ms(cfg.Webhooks.TimeoutMs),
		Logger:         logger.With("component", "shellenv"),
		Registerer:     reg,
	}
	if cfg.Cluster == nil {
		env, err = shellenv.New(opts)
		return env, nil, func() {}, err
	}
	// A change waits on the store for less than the request's 10 s
	// deadline: the NATS client may hold its lock for a reconnect attempt
	// on top (see cluster.StoreTimeout).
	opts.StoreTimeout = cluster.StoreTimeout
	cc := cfg.Cluster.clusterSettings()
	cc.Logger = logger.With("component", "cluster")
	cc.Registerer = reg
	cc.IdempotencyWindow = time.Duration(cfg.Jobs.IdempotencyWindowSeconds) * time.Second
	if node, err = cluster.Connect(ctx, cc); err != nil {
		return nil, nil, nil, err
	}
	opts.Store = node.RegistryStore()
	if env, err = shellenv.New(opts); err != nil {
		node.Close()
		return nil, nil, nil, err
	}
	followCtx, stop := context.WithCancel(context.Background())
	fail := func(err error) (*shellenv.Registry, *cluster.Node, context.CancelFunc, error) {
		stop()
		node.Close()
		return nil, nil, nil, err
	}
	if err := node.FollowRegistry(followCtx, env); err != nil {
		return fail(err)
	}
	select {
	case <-env.Ready():
		return env, node, stop, nil
	case <-ctx.Done():
		return fail(ctx.Err())
	case <-time.After(clusterReadyTimeout):
		return fail(fmt.Errorf("cluster: the shared registry was not read within %s", clusterReadyTimeout))
	}
}

// newServices builds the executor first (it stops what a crashed run left,
// as early as it can), then the registry, the agent store, the hooks, the
// pipeline over them and the MCP endpoint over the pipeline.
func newServices(ctx context.Context, cfg config, home, token, tokenPath string, logger *slog.Logger, reg prometheus.Registerer) (_ *services, err error) {
	cwd, err := os.Getwd()
	if err != nil {
		return nil, fmt.Errorf("working directory: %w", err)
	}
	sbx, policy, err := newSandbox(ctx, cfg, home, tokenPath, logger, reg)
	if err != nil {
		return nil, err
	}
	executor, err := newExecutor(cfg, home, cwd, token, sbx, policy, logger, reg)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			// A server that refuses to start leaves no cgroup subtree.
			_ = executor.Close(context.Background())
		}
	}()
	env, node, stopCluster, err := newRegistry(ctx, cfg, home, logger, reg)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil && node != nil {
			stopCluster()
			node.Close()
		}
	}()
	sessions, err := openSessions(ctx, cfg, home, cwd, node, logger, reg)
	if err != nil {
		return nil, err
	}
	hookCfg, err := hooks.Load(home)
	if err != nil {
		sessions.Close()
		return nil, err
	}
	workspaces, err := openWorkspaces(cfg, home, logger)
	if err != nil {
		sessions.Close()
		return nil, err
	}
	linkWorkspaces(ctx, workspaces, sessions, executor)
	pipeline := pipe.New(pipe.Options{
		Logger: logger.With("component", "run"),
		Env:    env,
		Jobs:   executor,
		Agents: sessions,
		// Hooks are the user's own scripts: they run outside the sandbox.
		Hooks:       hooks.NewRunner(hookCfg, executor, logger.With("component", "hooks")),
		Sandbox:     policy,
		SandboxHost: sbx,
		Limits:      cfg.jobLimits(),
		KeptResults: filepath.Join(home, "kept-results"),
		Workspaces:  workspaces,
	})
	return &services{
		workspaces:  workspaces,
		node:        node,
		stopCluster: stopCluster,
		sandbox:     sbx,
		policy:      policy,
		executor:    executor,
		env:         env,
		sessions:    sessions,
		hooks:       hookCfg,
		pipeline:    pipeline,
		mcp:         newMCP(cfg, pipeline, executor, logger),
	}, nil
}

// linkWorkspaces tells the workspaces what they need of the agents and the
// jobs: a workspace is kept while its agent is recorded, and an apply
// waits for its source and target to have no job running.
func linkWorkspaces(ctx context.Context, workspaces *workspace.Manager, sessions *agents.Store, executor *exec.Executor) {
	// A crash between a fork's record and its child's header leaves a
	// workspace no agent stands on.
	workspaces.Reconcile(func(id string) bool {
		_, err := sessions.Get(ctx, id)
		return !errors.Is(err, agents.ErrNotFound)
	})
	// An apply, a checkpoint and a rewind need the view still: no job, and
	// nothing a job left running, counted now (a job's Remaining is as
	// last polled: a sandbox's processes that were going as the call
	// ended would hold its checkpoint back).
	workspaces.SetBusy(func(ids []string) int {
		n := 0
		for _, id := range ids {
			for _, sn := range executor.Jobs(id, "") {
				if sn.State == exec.StateRunning {
					n++
					continue
				}
				if j, err := executor.Job(sn.ID); err == nil && j.Lingers(remainderSettle) {
					n++
				}
			}
		}
		return n
	})
}

// newMCP builds the MCP endpoint over the pipeline.
func newMCP(cfg config, pipeline *pipe.Service, executor *exec.Executor, logger *slog.Logger) *mcp.Handler {
	return mcp.New(mcp.Options{
		Logger:         logger.With("component", "mcp"),
		Pipeline:       pipeline,
		Jobs:           executor,
		SessionTimeout: cmp.Or(time.Duration(cfg.MCP.IdleTimeoutSeconds)*time.Second, mcpIdleTimeout),
		MaxSessions:    cmp.Or(cfg.MCP.MaxSessions, mcpMaxSessions),
		AllowedRoots:   cfg.MCP.AllowedRoots,
		// In cluster mode a session id names this replica, which
		// holds the session, so any replica routes it here.
		SessionIDPrefix: mcpSessionPrefix(cfg),
	})
}

// newSandbox builds the sandbox host (its network proxy included) and
// checks that the configured default policy can be enforced here, which it
// returns.
func newSandbox(ctx context.Context, cfg config, home, tokenPath string, logger *slog.Logger, reg prometheus.Registerer) (*sandbox.Host, sandbox.Policy, error) {
	policy := cfg.sandboxPolicy()
	pinned, err := cfg.proxyHosts()
	if err != nil {
		return nil, sandbox.Policy{}, err
	}
	proxy, err := netallow.New(netallow.Config{Hosts: pinned, MaxConns: cfg.Sandbox.ProxyMaxConnections, Registerer: reg, Log: logger})
	if err != nil {
		return nil, sandbox.Policy{}, fmt.Errorf("network proxy: %w", err)
	}
	sbx := sandbox.NewHost(ctx, sandbox.Config{
		Proxy:             proxy,
		Mechanism:         sandbox.Mechanism(cfg.Sandbox.Mechanism),
		Bwrap:             cfg.Sandbox.Bwrap,
		Home:              home,
		TokenFile:         tokenPath,
		WritableRoots:     cfg.Sandbox.WritableRoots,
		Protected:         cfg.Sandbox.ProtectedPaths,
		Hidden:            cfg.Sandbox.HiddenPaths,
		GitScanMaxEntries: cfg.Sandbox.GitScanMaxEntries,
		NoSeccomp:         cfg.Sandbox.Seccomp != nil && !*cfg.Sandbox.Seccomp,
	})
	if err := sbx.Check(policy); err != nil {
		return nil, sandbox.Policy{}, fmt.Errorf("sandbox default: %w", err)
	}
	if sup := sbx.Support(); sup.Mechanism == "" || sup.Reason != "" {
		logger.Warn("sandbox: some policies cannot be enforced here; requests for them are refused", "mechanism", sup.Mechanism, "reason", sup.Reason)
	} else {
		logger.Info("sandbox", "mechanism", sup.Mechanism, "fallback_reason", sbx.FellBack())
	}
	return sbx, policy, nil
}

// openSessions opens the agent store: transcripts as files under home, or
// in cluster mode in the cluster's shared journal, with agent ids that name
// this replica.
func openSessions(ctx context.Context, cfg config, home, cwd string, node *cluster.Node, logger *slog.Logger, reg prometheus.Registerer) (*agents.Store, error) {
	var err error
	var newAgentID func() string // the default
	var journal agents.Journal   // none: transcripts are files in home
	var replica string
	if cfg.Cluster != nil {
		// Agent ids name this replica, their home, where their commands
		// run, so any replica routes an agent's calls here. Headers and
		// transcripts are in the cluster's shared store.
		replica = cfg.Cluster.ReplicaID
		src, prefix := ids.NewSource(nil), status.AgentIDPrefix(replica)
		newAgentID = func() string { return src.New(prefix) }
		if journal, err = node.Journal(ctx); err != nil {
			return nil, err
		}
	}
	sessions, err := agents.Open(ctx, agents.Options{
		Journal:     journal,
		Home:        replica,
		NewID:       newAgentID,
		Dir:         filepath.Join(home, "sessions"),
		KeptResults: filepath.Join(home, "kept-results"),
		DefaultCwd:  cwd,
		MaxDepth:    cfg.Agents.MaxDepth,
		Sync:        agents.SyncPolicy(cfg.Agents.TranscriptSync),
		Logger:      logger.With("component", "agents"),
		Registerer:  reg,
	})
	if err != nil {
		return nil, err
	}
	return sessions, nil
}

// openWorkspaces opens the snapshot workspaces under home (off in cluster
// mode) with the configured disk budget, and says when the host cannot
// give them.
func openWorkspaces(cfg config, home string, logger *slog.Logger) (*workspace.Manager, error) {
	var wsOff string
	if cfg.Cluster != nil {
		// A snapshot lives on the replica that holds its layers; agents
		// move between replicas' stores, their layers do not.
		// Every request for an agent is answered by its home, so the
		// replica named here is the agent's home.
		wsOff = fmt.Sprintf("cluster mode: snapshot workspaces are kept on one host and are not supported across replicas; refused by replica %q, the home of the agent (use workspace: shared)", cfg.Cluster.ReplicaID)
	}
	workspaces, err := workspace.Open(filepath.Join(home, "workspaces"), wsOff, logger.With("component", "workspaces"))
	if err != nil {
		return nil, err
	}
	workspaces.SetMaxBytes(cfg.Workspaces.MaxBytes)
	workspaces.SetMaxLayers(cfg.Workspaces.MaxLayers)
	workspaces.SetCheckpointDepth(cfg.Workspaces.CheckpointDepth)
	workspaces.SetHome(home)
	workspaces.Recover()
	if ok, why := workspaces.Available(); !ok {
		logger.Info("workspaces: snapshot forks are unavailable; requests for them are refused", "reason", why)
	}
	return workspaces, nil
}

// mcpSessionPrefix is the MCP session id prefix: this replica's in cluster
// mode, else none.
func mcpSessionPrefix(cfg config) string {
	if cfg.Cluster == nil {
		return ""
	}
	return status.MCPSessionPrefix(cfg.Cluster.ReplicaID)
}

// newExecutor builds the executor from the configuration's env and jobs
// sections. No child may see the token, whatever the variable's name.
func newExecutor(cfg config, home, cwd, token string, sbx *sandbox.Host, policy sandbox.Policy, logger *slog.Logger, reg prometheus.Registerer) (*exec.Executor, error) {
	var idPrefix string // the default
	if cfg.Cluster != nil {
		// Job ids name this replica, so any replica routes them here.
		idPrefix = status.JobIDPrefix(cfg.Cluster.ReplicaID)
	}
	return exec.New(exec.Options{
		IDPrefix: idPrefix,
		Logger:   logger.With("component", "exec"),
		Home:     home,
		Environ:  os.Environ(),
		Policy: exec.EnvPolicy{
			Inherit:               exec.Inherit(cfg.Env.Inherit),
			Exclude:               cfg.Env.Exclude,
			IgnoreDefaultExcludes: cfg.Env.IgnoreDefaultExcludes,
			Set:                   cfg.Env.Set,
			Secrets:               []string{token},
		},
		DefaultCwd:            cwd,
		DefaultTimeout:        ms(cfg.Jobs.DefaultTimeoutMs),
		MaxTimeout:            ms(cfg.Jobs.MaxTimeoutMs),
		Grace:                 ms(cfg.Jobs.GraceMs),
		CaptureBytes:          cfg.Jobs.CaptureBytes,
		SpoolMaxBytes:         cfg.Jobs.SpoolMaxBytes,
		SpoolTotalBytes:       cfg.Jobs.SpoolTotalBytes,
		MaxRunning:            cfg.Jobs.MaxRunning,
		MaxBackgroundPerAgent: cfg.Jobs.MaxBackgroundPerAgent,
		Retention:             time.Duration(cfg.Jobs.RetentionSeconds) * time.Second,
		RetainMax:             cfg.Jobs.RetainMax,
		IdempotencyWindow:     time.Duration(cfg.Jobs.IdempotencyWindowSeconds) * time.Second,
		Containment:           cfg.Jobs.Containment,
		Limits:                cfg.jobLimits(),
		Sandbox:               sbx,
		SandboxDefault:        policy,
		Registerer:            reg,
		Term:                  cfg.Jobs.Terminal.Term,
		RecordInput:           cfg.Jobs.RecordInput,
	})
}

// newHTTPServer is the http.Server for handler; its requests run under
// reqCtx.
func newHTTPServer(handler http.Handler, cfg config, logger *slog.Logger, reqCtx context.Context) *http.Server {
	headerTimeout := ms(cfg.HTTP.HeaderTimeoutMs)
	if headerTimeout == 0 {
		headerTimeout = 10 * time.Second
	}
	return &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: headerTimeout,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
		BaseContext:       func(net.Listener) context.Context { return reqCtx },
	}
}

// shutdown stops dshd within budget. HTTP first: stop taking requests.
// Requests in flight may be waiting on jobs, so the jobs are stopped
// (through the kill path) while HTTP drains; their waiters then answer with
// the cancelled jobs. Then cancelRequests ends the requests still open
// (long-polls, streams); once HTTP has drained and the MCP calls no request
// waits for have recorded their results, stopLeases ends the plugin leases
// and the agent store is closed.
func shutdown(srv *http.Server, svc *services, budget time.Duration, cancelRequests, stopLeases func()) error {
	ctx, stop := context.WithTimeout(context.Background(), budget)
	defer stop()
	var errs []error
	httpDone := make(chan error, 1)
	go func() { httpDone <- srv.Shutdown(ctx) }()
	if err := svc.executor.Close(ctx); err != nil {
		errs = append(errs, fmt.Errorf("stop jobs: %w", err))
	}
	cancelRequests()
	if err := <-httpDone; err != nil {
		errs = append(errs, fmt.Errorf("http shutdown: %w", err))
	}
	// MCP calls whose session ended record their stopped jobs' results.
	if err := svc.mcp.Wait(ctx); err != nil {
		errs = append(errs, err)
	}
	stopLeases()
	svc.leaveCluster()
	if err := svc.sessions.Close(); err != nil {
		errs = append(errs, fmt.Errorf("close sessions: %w", err))
	}
	return errors.Join(errs...)
}

// shutdownMargin is the part of the shutdown budget beyond the jobs'
// grace: draining HTTP, reaping, closing the stores.
const shutdownMargin = 10 * time.Second

// shutdownBudget is how long shutdown may take with the given grace (0:
// the default). Config validation keeps the grace at most exec.MaxGrace.
func shutdownBudget(grace time.Duration) time.Duration {
	if grace <= 0 {
		grace = exec.DefaultGrace
	}
	return grace + shutdownMargin
}

// resolveHome applies docs/design.md#invariants, invariant 10, to the flag,
// config and environment.
func resolveHome(o options, cfg config, getenv func(string) string) (string, error) {
	cwd, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("working directory: %w", err)
	}
	userHome := getenv("HOME")
	if userHome == "" {
		userHome, _ = os.UserHomeDir()
	}
	return shellenv.ResolveHome(shellenv.HomeInput{
		Flag:        o.home,
		Config:      cfg.DSHHome,
		SkillsLocal: cfg.Skills.Local.DSHHome,
		Ambient:     getenv(shellenv.KeyHome),
		UserHome:    userHome,
		Cwd:         cwd,
	})
}

// ensureHome creates the home directory and what dshd writes in it,
// private to the server's user, and refuses a home where a symbolic link
// or another user's file stands in their place (see homefs).
func ensureHome(home string) error {
	return homefs.Prepare(home, homefs.Layout{
		Dirs:  []string{"sessions", "jobs"},
		Files: []string{"server.token", "contributors.json", "jobs/idempotency.jsonl"},
	})
}

// redactToken rewrites log attributes that hold the token, which no log
// line may carry: a client can send it where an error quotes the request
// (an unknown field's name, say), and the log is readable by whoever keeps
// dshd's output.
func redactToken(token string) func([]string, slog.Attr) slog.Attr {
	return func(_ []string, a slog.Attr) slog.Attr {
		var text string
		switch v := a.Value.Resolve(); v.Kind() {
		case slog.KindString:
			text = v.String()
		case slog.KindAny:
			text = fmt.Sprint(v.Any())
		default:
			return a
		}
		if !strings.Contains(text, token) {
			return a
		}
		return slog.String(a.Key, strings.ReplaceAll(text, token, redacted))
	}
}

// redacted stands where the token would have been.
const redacted = "[token]"

// minTokenLen is the shortest token dshd accepts: 32 characters (the
// generated one is 64 hex digits, 256 bits).
const minTokenLen = 32

// loadToken reads the token from tokenFile, or from <home>/server.token,
// generating 256 random bits into the latter (mode 0600) when it does not
// exist. A token file that exists but holds fewer than minTokenLen
// characters is refused, naming the file: it is never replaced, since
// harnesses may read it.
func loadToken(home, tokenFile string) (token, path string, err error) {
	if tokenFile != "" {
		b, err := os.ReadFile(tokenFile)
		if err != nil {
			return "", "", fmt.Errorf("read token file: %w", err)
		}
		if token, err = checkToken(tokenFile, b); err != nil {
			return "", "", err
		}
		return token, tokenFile, nil
	}
	path = filepath.Join(home, "server.token")
	// O_NOFOLLOW: a link planted in the home is never read or chmodded.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	switch {
	case err == nil:
		defer f.Close()
		b, err := io.ReadAll(io.LimitReader(f, 4096))
		if err != nil {
			return "", "", fmt.Errorf("read token file: %w", err)
		}
		if token, err = checkToken(path, b); err != nil {
			return "", "", err
		}
		if err := f.Chmod(0o600); err != nil {
			return "", "", fmt.Errorf("secure token file: %w", err)
		}
		return token, path, nil
	case !errors.Is(err, fs.ErrNotExist):
		return "", "", fmt.Errorf("read token file: %w", err)
	}
	var raw [32]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return "", "", fmt.Errorf("generate token: %w", err)
	}
	token = hex.EncodeToString(raw[:])
	// A fresh temporary name (O_EXCL), fsynced and renamed over the final
	// one: neither step follows a link.
	if err := atomicfile.Write(path, []byte(token+"\n"), atomicfile.Options{Perm: 0o600}); err != nil {
		return "", "", fmt.Errorf("write token: %w", err)
	}
	return token, path, nil
}

// checkToken returns the token held in b, read from path, without the white
// space around it, or an error naming path when it is too short. The error
// never quotes the file's content.
func checkToken(path string, b []byte) (string, error) {
	token := strings.TrimSpace(string(b))
	if len(token) < minTokenLen {
		return "", fmt.Errorf("token file %s holds %d characters; a token must have at least %d (delete the file to have dshd generate one)", path, len(token), minTokenLen)
	}
	return token, nil
}

// listen opens addr: "unix:/path" or host:port. A host that is not loopback
// needs allowRemote: anyone who can reach the port and holds the token can
// run commands as this user.
func listen(addr string, allowRemote bool) (net.Listener, error) {
	if path, ok := strings.CutPrefix(addr, "unix:"); ok {
		if fi, err := os.Lstat(path); err == nil && fi.Mode()&os.ModeSocket != 0 {
			_ = os.Remove(path) // a stale socket from an earlier run
		}
		ln, err := net.Listen("unix", path)
		if err != nil {
			return nil, fmt.Errorf("listen: %w", err)
		}
		if err := os.Chmod(path, 0o600); err != nil {
			ln.Close()
			return nil, fmt.Errorf("secure socket: %w", err)
		}
		return ln, nil
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("--addr %q: %w", addr, err)
	}
	if !allowRemote && !isLoopback(host) {
		return nil, fmt.Errorf("--addr %q is not a loopback address; pass --allow-remote to listen on it", addr)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen: %w", err)
	}
	return ln, nil
}

// allowedHosts says which Host values, besides localhost and loopback
// addresses, requests may carry. A Unix socket takes any: no browser
// reaches it, so DNS rebinding cannot. With --allow-remote, the listen
// address's host is accepted; when that is a wildcard (every interface),
// each address of this machine and its host name are. Any other name is
// refused, which is what defeats DNS rebinding.
func allowedHosts(addr string, allowRemote bool) (hosts []string, anyHost bool, err error) {
	if strings.HasPrefix(addr, "unix:") {
		return nil, true, nil
	}
	if !allowRemote {
		return nil, false, nil
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, false, fmt.Errorf("--addr %q: %w", addr, err)
	}
	if ip := net.ParseIP(host); host != "" && (ip == nil || !ip.IsUnspecified()) {
		return []string{host}, false, nil
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, false, fmt.Errorf("list interface addresses: %w", err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			hosts = append(hosts, n.IP.String())
		}
	}
	if name, err := os.Hostname(); err == nil && name != "" {
		hosts = append(hosts, name)
	}
	return hosts, false, nil
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func baseURL(ln net.Listener) string {
	if ln.Addr().Network() == "unix" {
		return "unix:" + ln.Addr().String()
	}
	return "http://" + ln.Addr().String()
}

// sandboxReport is what GET /healthz says of sandboxes.
type sandboxReport struct {
	host   *sandbox.Host
	policy sandbox.Policy
}

func (r sandboxReport) Support() sandbox.Support { return r.host.Support() }
func (r sandboxReport) Default() sandbox.Policy  { return r.policy }

// remainderSettle is how long after a job's end what is left of it is
// looked at again before it counts as left running: bubblewrap's sandbox
// processes are gone a moment after its leader.
const remainderSettle = 50 * time.Millisecond

// stopWriters ends the jobs of agents whose workspace layers grew past
// workspaces.maxBytes, and what those jobs left running.
func stopWriters(ctx context.Context, executor *exec.Executor, logger *slog.Logger, ids []string) {
	for _, id := range ids {
		for _, j := range executor.Jobs(id, "") {
			if j.State != exec.StateRunning && j.Remaining == nil {
				continue
			}
			logger.Warn("stopping a job: its agent's workspace layer grew past workspaces.maxBytes", "job_id", j.ID, "agent_id", id)
			go func() {
				if _, err := executor.Cancel(ctx, j.ID); err != nil && ctx.Err() == nil {
					logger.Warn("stop a job over the workspace budget", "job_id", j.ID, "err", err)
				}
			}()
		}
	}
}
