package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/dshd/dshd/internal/agents"
	"github.com/dshd/dshd/internal/cluster"
	"github.com/dshd/dshd/internal/exec"
	"github.com/dshd/dshd/internal/limits"
	"github.com/dshd/dshd/internal/netallow"
	"github.com/dshd/dshd/internal/sandbox"
	"github.com/dshd/dshd/internal/workspace"
)

// config is the server's configuration file (YAML, or JSON, which is YAML).
// Every field is optional; zero values take the defaults in defaults().
type config struct {
	DSHHome string `yaml:"dshHome"`
	Skills  struct {
		Local struct {
			DSHHome string `yaml:"dshHome"`
		} `yaml:"local"`
	} `yaml:"skills"`
	Env struct {
		Inherit               string            `yaml:"inherit"`
		Exclude               []string          `yaml:"exclude"`
		IgnoreDefaultExcludes bool              `yaml:"ignoreDefaultExcludes"`
		Set                   map[string]string `yaml:"set"`
	} `yaml:"env"`
	Jobs struct {
		DefaultTimeoutMs      int   `yaml:"defaultTimeoutMs"`
		MaxTimeoutMs          int   `yaml:"maxTimeoutMs"`
		GraceMs               int   `yaml:"graceMs"`
		CaptureBytes          int   `yaml:"captureBytes"`
		SpoolMaxBytes         int64 `yaml:"spoolMaxBytes"`
		SpoolTotalBytes       int64 `yaml:"spoolTotalBytes"`
		MaxRunning            int   `yaml:"maxRunning"`
		MaxBackgroundPerAgent int   `yaml:"maxBackgroundPerAgent"`
		RetentionSeconds      int   `yaml:"retentionSeconds"`
		RetainMax             int   `yaml:"retainMax"`
		// IdempotencyWindowSeconds is how long an Idempotency-Key is kept.
		IdempotencyWindowSeconds int `yaml:"idempotencyWindowSeconds"`
		// Containment is auto (default), cgroup or group; see exec.Containment*.
		Containment string `yaml:"containment"`
		// Limits are every job's default limits; see package limits.
		Limits struct {
			Pids        int64   `yaml:"pids"`
			MemoryBytes int64   `yaml:"memoryBytes"`
			CPU         float64 `yaml:"cpu"`
		} `yaml:"limits"`
		// Terminal configures terminal jobs (tty).
		Terminal struct {
			// Term is TERM for terminal jobs (default xterm-256color).
			Term string `yaml:"term"`
		} `yaml:"terminal"`
		// RecordInput keeps the bytes written to jobs' input, not only
		// their size and time.
		RecordInput bool `yaml:"recordInput"`
	} `yaml:"jobs"`
	Agents struct {
		MaxDepth       int    `yaml:"maxDepth"`
		TranscriptSync string `yaml:"transcriptSync"`
	} `yaml:"agents"`
	// Workspaces configures snapshot workspaces (docs/workspaces.md).
	Workspaces struct {
		// MaxBytes caps the layers' disk use: a snapshot fork is refused
		// while they use this much, and layers that grow past it stop
		// their writers (0: no cap).
		MaxBytes int64 `yaml:"maxBytes"`
		// MaxLayers bounds an agent's stack of frozen layers (its
		// checkpoints and forks), at most 480; 0: 400.
		MaxLayers int `yaml:"maxLayers"`
		// CheckpointDepth is how many of an agent's newest checkpoints
		// are kept individually; older ones are compacted into one layer
		// (0: 100). At most half of maxLayers.
		CheckpointDepth int `yaml:"checkpointDepth"`
	} `yaml:"workspaces"`
	Webhooks struct {
		TimeoutMs int `yaml:"timeoutMs"`
	} `yaml:"webhooks"`
	// Sandbox is the server's default sandbox policy and how sandboxes are
	// built; see package sandbox.
	Sandbox struct {
		Policy  string `yaml:"policy"`  // unrestricted (default), workspace-write, read-only
		Network string `yaml:"network"` // on (default), allowlist, off
		// Allow is the default policy's allowlist, with network allowlist.
		Allow []string `yaml:"allow"`
		// ProxyHosts pins host names to addresses for the allowlist's
		// proxy, chosen by the operator: a pinned name is not resolved,
		// and its address may be loopback or private (it still has to be
		// on a command's allowlist).
		ProxyHosts map[string]string `yaml:"proxyHosts"`
		// ProxyMaxConnections bounds the connections one job holds open
		// to the allowlist's proxy at once (0: netallow.DefaultMaxConns).
		ProxyMaxConnections int `yaml:"proxyMaxConnections"`
		// Mechanism: auto (default), namespaces or bubblewrap.
		Mechanism string `yaml:"mechanism"`
		// Bwrap is the bubblewrap binary (default: bwrap on PATH).
		Bwrap string `yaml:"bwrap"`
		// WritableRoots are extra directories writable under workspace-write.
		WritableRoots []string `yaml:"writableRoots"`
		// ProtectedPaths stay read-only inside writable roots.
		ProtectedPaths []string `yaml:"protectedPaths"`
		// HiddenPaths are hidden inside every sandbox; absent means
		// sandbox.DefaultHidden, [] hides nothing more than the home.
		HiddenPaths []string `yaml:"hiddenPaths"`
		// GitScanMaxEntries bounds the search for .git directories in a
		// command's writable roots (default
		// sandbox.DefaultGitScanMaxEntries); a command whose roots hold
		// more entries is refused, never run with a .git left writable.
		GitScanMaxEntries int `yaml:"gitScanMaxEntries"`
		// Seccomp: false turns the system-call filter of confined
		// commands off (absent: on), to measure what it costs.
		Seccomp *bool `yaml:"seccomp"`
	} `yaml:"sandbox"`
	// Cluster turns on cluster mode (see package cluster). Without it dshd
	// runs alone and never connects to NATS.
	Cluster *clusterConfig `yaml:"cluster"`
	HTTP    struct {
		MaxBodyBytes    int64 `yaml:"maxBodyBytes"`
		HeaderTimeoutMs int   `yaml:"headerTimeoutMs"`
		BodyTimeoutMs   int   `yaml:"bodyTimeoutMs"`
	} `yaml:"http"`
	Files struct {
		// MaxUploadBytes caps a body uploaded to the file routes (a file
		// or a tar stream); 0 = the default, 1 GiB.
		MaxUploadBytes int64 `yaml:"maxUploadBytes"`
	} `yaml:"files"`
	MCP struct {
		// MaxSessions caps the open MCP sessions (0 = the default, 256).
		MaxSessions int `yaml:"maxSessions"`
		// IdleTimeoutSeconds ends a session no request has used for this
		// long (0 = the default, 30 minutes).
		IdleTimeoutSeconds int `yaml:"idleTimeoutSeconds"`
		// AllowedRoots are the absolute directories a client's MCP roots
		// may lie within to become a new session's agent's cwd.
		AllowedRoots []string `yaml:"allowedRoots"`
	} `yaml:"mcp"`
}

// clusterConfig is the cluster section. Settings come from the file only,
// never from environment variables a child could inherit.
type clusterConfig struct {
	URLs            []string `yaml:"urls"`
	CredentialsFile string   `yaml:"credentialsFile"`
	// PeerSecretFile holds the secret replicas sign forwarded requests
	// with; "" derives it from the token.
	PeerSecretFile string `yaml:"peerSecretFile"`
	ReplicaID      string `yaml:"replicaId"`
	AdvertiseURL   string `yaml:"advertiseUrl"`
	StoreReplicas  int    `yaml:"storeReplicas"`
}

// clusterSettings is the cluster package's form of the section.
func (c *clusterConfig) clusterSettings() cluster.Config {
	return cluster.Config{
		URLs: c.URLs, CredentialsFile: c.CredentialsFile, ReplicaID: c.ReplicaID,
		AdvertiseURL: c.AdvertiseURL, StoreReplicas: c.StoreReplicas,
	}
}

// loadConfig reads path; "" is the empty configuration. Unknown keys are
// errors, so a misspelt setting is not silently ignored.
func loadConfig(path string) (config, error) {
	var c config
	if path == "" {
		return c, nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return c, fmt.Errorf("read config: %w", err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil && !errors.Is(err, io.EOF) {
		return c, fmt.Errorf("config %s: %w", path, err)
	}
	if err := c.validate(); err != nil {
		return c, fmt.Errorf("config %s: %w", path, err)
	}
	return c, nil
}

// validate reports every setting that is wrong, not only the first.
func (c *config) validate() error {
	return errors.Join(slices.Concat(c.validateChoices(), c.validatePaths(), c.validateBounds())...)
}

// validateChoices checks the settings that name one of a set of choices,
// and those that other packages validate.
func (c *config) validateChoices() []error {
	var errs []error
	if !agents.SyncPolicy(c.Agents.TranscriptSync).Valid() {
		errs = append(errs, fmt.Errorf("agents.transcriptSync: %q is not %s or %s", c.Agents.TranscriptSync, agents.SyncCommit, agents.SyncNone))
	}
	switch c.Env.Inherit {
	case "", "all", "core", "none":
	default:
		errs = append(errs, fmt.Errorf("env.inherit: %q is not all, core or none", c.Env.Inherit))
	}
	if err := c.jobLimits().Validate(); err != nil {
		errs = append(errs, fmt.Errorf("jobs.limits: %w", err))
	}
	if !sandbox.ValidMechanism(sandbox.Mechanism(c.Sandbox.Mechanism)) {
		errs = append(errs, fmt.Errorf("sandbox.mechanism: %q is not auto, namespaces or bubblewrap", c.Sandbox.Mechanism))
	}
	if c.Sandbox.GitScanMaxEntries < 0 {
		errs = append(errs, fmt.Errorf("sandbox.gitScanMaxEntries: %d is negative", c.Sandbox.GitScanMaxEntries))
	}
	if _, err := c.proxyHosts(); err != nil {
		errs = append(errs, err)
	}
	if err := c.sandboxPolicy().ValidateEffective(); err != nil {
		errs = append(errs, fmt.Errorf("sandbox: %w", err))
	}
	switch c.Jobs.Containment {
	case "", "auto", "cgroup", "group":
	default:
		errs = append(errs, fmt.Errorf("jobs.containment: %q is not auto, cgroup or group", c.Jobs.Containment))
	}
	return errs
}

// validatePaths checks that the paths given are absolute, and the
// cluster's settings.
func (c *config) validatePaths() []error {
	var errs []error
	for _, p := range slices.Concat(c.Sandbox.WritableRoots, c.Sandbox.ProtectedPaths, c.Sandbox.HiddenPaths) {
		if !filepath.IsAbs(p) {
			errs = append(errs, fmt.Errorf("sandbox: %q is not an absolute path", p))
		}
	}
	for _, p := range c.MCP.AllowedRoots {
		if !filepath.IsAbs(p) {
			errs = append(errs, fmt.Errorf("mcp.allowedRoots: %q is not an absolute path", p))
		}
	}
	if c.Cluster != nil {
		if err := c.Cluster.clusterSettings().Validate(); err != nil {
			errs = append(errs, fmt.Errorf("cluster: %w", err))
		}
		if f := c.Cluster.CredentialsFile; f != "" && !filepath.IsAbs(f) {
			errs = append(errs, fmt.Errorf("cluster.credentialsFile: %q is not an absolute path", f))
		}
		if f := c.Cluster.PeerSecretFile; f != "" && !filepath.IsAbs(f) {
			errs = append(errs, fmt.Errorf("cluster.peerSecretFile: %q is not an absolute path", f))
		}
	}
	return errs
}

// validateBounds checks the numbers: none negative, and each within what
// it bounds.
func (c *config) validateBounds() []error {
	var errs []error
	for _, f := range []struct {
		name string
		v    int64
	}{
		{"jobs.defaultTimeoutMs", int64(c.Jobs.DefaultTimeoutMs)}, {"jobs.maxTimeoutMs", int64(c.Jobs.MaxTimeoutMs)},
		{"jobs.graceMs", int64(c.Jobs.GraceMs)}, {"jobs.captureBytes", int64(c.Jobs.CaptureBytes)},
		{"jobs.spoolMaxBytes", c.Jobs.SpoolMaxBytes}, {"jobs.spoolTotalBytes", c.Jobs.SpoolTotalBytes}, {"jobs.maxRunning", int64(c.Jobs.MaxRunning)},
		{"jobs.maxBackgroundPerAgent", int64(c.Jobs.MaxBackgroundPerAgent)}, {"jobs.retentionSeconds", int64(c.Jobs.RetentionSeconds)},
		{"jobs.retainMax", int64(c.Jobs.RetainMax)}, {"jobs.idempotencyWindowSeconds", int64(c.Jobs.IdempotencyWindowSeconds)}, {"agents.maxDepth", int64(c.Agents.MaxDepth)},
		{"webhooks.timeoutMs", int64(c.Webhooks.TimeoutMs)}, {"http.maxBodyBytes", c.HTTP.MaxBodyBytes}, {"files.maxUploadBytes", c.Files.MaxUploadBytes},
		{"http.headerTimeoutMs", int64(c.HTTP.HeaderTimeoutMs)}, {"http.bodyTimeoutMs", int64(c.HTTP.BodyTimeoutMs)},
		{"mcp.maxSessions", int64(c.MCP.MaxSessions)}, {"mcp.idleTimeoutSeconds", int64(c.MCP.IdleTimeoutSeconds)},
		{"workspaces.maxBytes", c.Workspaces.MaxBytes}, {"workspaces.maxLayers", int64(c.Workspaces.MaxLayers)},
		{"workspaces.checkpointDepth", int64(c.Workspaces.CheckpointDepth)},
		{"sandbox.proxyMaxConnections", int64(c.Sandbox.ProxyMaxConnections)},
	} {
		if f.v < 0 {
			errs = append(errs, fmt.Errorf("%s: must not be negative", f.name))
		}
	}
	if limit := exec.MaxGrace.Milliseconds(); int64(c.Jobs.GraceMs) > limit {
		errs = append(errs, fmt.Errorf("jobs.graceMs: %d exceeds the maximum %d: shutdown waits out the grace before it kills every job, and must end in bounded time", c.Jobs.GraceMs, limit))
	}
	if c.Workspaces.MaxLayers > workspace.MaxLayersLimit {
		errs = append(errs, fmt.Errorf("workspaces.maxLayers: %d exceeds the maximum %d: overlayfs mounts at most 500 layers, and a view stands on the agent's layers and its base", c.Workspaces.MaxLayers, workspace.MaxLayersLimit))
	}
	maxLayers, depth := c.Workspaces.MaxLayers, c.Workspaces.CheckpointDepth
	if maxLayers == 0 {
		maxLayers = workspace.DefaultMaxLayers
	}
	if depth == 0 {
		depth = workspace.DefaultCheckpointDepth
	}
	if depth > maxLayers/2 {
		errs = append(errs, fmt.Errorf("workspaces.checkpointDepth: %d exceeds half of workspaces.maxLayers (%d): the newest checkpoints kept individually, a batch waiting for compaction and the layers a fork inherits must fit under maxLayers", depth, maxLayers))
	}
	return errs
}

// sandboxPolicy is the configured default policy, completed by
// sandbox.Default.
func (c *config) sandboxPolicy() sandbox.Policy {
	p := sandbox.Policy{FS: sandbox.FS(c.Sandbox.Policy), Network: sandbox.Network(c.Sandbox.Network)}
	if c.Sandbox.Allow != nil {
		p.Allow = sandbox.HostsOf(c.Sandbox.Allow)
	}
	return p.Or(sandbox.Default)
}

// proxyHosts are the operator's pinned names (sandbox.proxyHosts).
func (c *config) proxyHosts() (map[string][]netip.Addr, error) {
	out := make(map[string][]netip.Addr, len(c.Sandbox.ProxyHosts))
	var errs []error
	for name, addr := range c.Sandbox.ProxyHosts {
		e, err := netallow.ParseEntry(name)
		if err != nil || e.Host == "" || e.Wildcard || e.Port != 0 {
			errs = append(errs, fmt.Errorf("sandbox.proxyHosts: %q is not a host name", name))
			continue
		}
		a, err := netip.ParseAddr(addr)
		if err != nil || a.Zone() != "" {
			errs = append(errs, fmt.Errorf("sandbox.proxyHosts: %s: %q is not an address", name, addr))
			continue
		}
		out[e.Host] = []netip.Addr{a.Unmap()}
	}
	return out, errors.Join(errs...)
}

// jobLimits are the configured default limits of every job.
func (c *config) jobLimits() limits.Limits {
	return limits.Limits{Pids: c.Jobs.Limits.Pids, MemoryBytes: c.Jobs.Limits.MemoryBytes, CPU: c.Jobs.Limits.CPU}
}

func ms(v int) time.Duration { return time.Duration(v) * time.Millisecond }

// peerKey reads the cluster's peer secret file: nil (derive the key from
// the token) when none is configured. A secret shorter than 32 bytes is
// refused.
func (c *clusterConfig) peerKey() ([]byte, error) {
	if c.PeerSecretFile == "" {
		return nil, nil
	}
	b, err := os.ReadFile(c.PeerSecretFile)
	if err != nil {
		return nil, fmt.Errorf("cluster.peerSecretFile: %w", err)
	}
	b = bytes.TrimSpace(b)
	if len(b) < 32 {
		return nil, fmt.Errorf("cluster.peerSecretFile: %s holds %d bytes, want at least 32", c.PeerSecretFile, len(b))
	}
	return b, nil
}
