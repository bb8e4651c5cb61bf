package exec

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dshd/dshd/internal/ids"
	"github.com/dshd/dshd/internal/proc"
	"github.com/dshd/dshd/internal/sandbox"
	"github.com/dshd/dshd/internal/shellenv"
)

// Defaults applied by New to zero Options fields.
const (
	DefaultTimeout               = 120 * time.Second
	DefaultMaxTimeout            = 600 * time.Second
	DefaultGrace                 = 3 * time.Second
	DefaultCaptureBytes          = 64 << 10
	DefaultSpoolMaxBytes         = 64 << 20
	DefaultSpoolTotalBytes       = 1 << 30
	DefaultMaxRunning            = 256
	DefaultMaxBackgroundPerAgent = 10
	DefaultRetention             = 15 * time.Minute
	DefaultRetainMax             = 1000
	DefaultIdempotencyWindow     = 24 * time.Hour

	// MaxGrace is the longest Grace New accepts. Shutdown waits out the
	// grace of every job before its SIGKILL, and service managers kill a
	// stopping service outright after a while (systemd: 90 s by default),
	// which would leave the jobs' groups running: the grace plus the rest
	// of the shutdown must fit well inside that.
	MaxGrace = 60 * time.Second
)

// retryAfter is the hint given with ErrTooManyJobs.
const retryAfter = time.Second

// Options configure an Executor. Zero fields take the Default* values.
type Options struct {
	// Logger receives operational logs; nil discards them.
	Logger *slog.Logger
	// Home is the absolute dshd home; output spools go to <Home>/jobs
	// (directory 0700, files 0600). Empty disables spooling: output beyond
	// CaptureBytes is then counted as dropped.
	Home string
	// Environ is the server's environment (os.Environ()).
	Environ []string
	// Policy is the environment policy of docs/design.md#child-environment.
	Policy EnvPolicy
	// DefaultCwd is used when Spec.Cwd is empty; "" means the server's cwd.
	DefaultCwd string
	// DefaultTimeout applies to foreground jobs without a timeout.
	DefaultTimeout time.Duration
	// MaxTimeout caps foreground timeouts.
	MaxTimeout time.Duration
	// Grace is the time between SIGTERM and SIGKILL on the kill path, at
	// most MaxGrace.
	Grace time.Duration
	// CaptureBytes is the in-memory capture per stream (head plus tail).
	CaptureBytes int
	// SpoolMaxBytes is the most spooled per stream; later bytes are dropped.
	SpoolMaxBytes int64
	// SpoolTotalBytes bounds the spools of all recorded jobs together. A
	// stream that needs more room first evicts finished jobs, oldest first
	// (they are forgotten as if retention had ended); when only running
	// jobs hold spool bytes, its later bytes are dropped (DropSpoolBudget).
	SpoolTotalBytes int64
	// MaxRunning caps running jobs, foreground and background.
	MaxRunning int
	// MaxBackgroundPerAgent caps running background jobs of one agent.
	MaxBackgroundPerAgent int
	// Retention is how long finished jobs stay recorded.
	Retention time.Duration
	// RetainMax is how many finished jobs stay recorded at most.
	RetainMax int
	// Now is the clock for job times and retention; nil means time.Now.
	Now func() time.Time
	// Registerer receives the executor's metrics; nil registers none.
	Registerer prometheus.Registerer
	// IDPrefix starts every job id; default "job_". Cluster mode names the
	// owning replica in it ("job_<replica>."), so any replica can route a
	// job's requests to its owner. It must start with "job_".
	IDPrefix string
	// Containment is ContainmentAuto (""), ContainmentCgroup or
	// ContainmentGroup.
	Containment string
	// NoCgroupV1 keeps jobs out of cgroup v1 groups on a hybrid host: the
	// limits cgroup2 lacks a controller for fall to dshd's watcher.
	NoCgroupV1 bool
	// Limits are every job's and process's default limits (see Limits).
	Limits Limits
	// IdempotencyWindow is how long an idempotency key is remembered after
	// its first use, across restarts and whether or not its job is still
	// recorded; 0 means DefaultIdempotencyWindow.
	IdempotencyWindow time.Duration
	// Sandbox builds the sandboxes of confined policies; nil: only
	// unconfined policies can be enforced.
	Sandbox *sandbox.Host
	// SandboxDefault fills what Spec.Sandbox leaves empty; its own empty
	// fields mean sandbox.Default.
	SandboxDefault sandbox.Policy
	// Term is TERM for terminal jobs (Spec.TTY); "" means DefaultTerm.
	Term string
	// RecordInput keeps the first CaptureBytes bytes written to each job's
	// input (InputRecord.Text); otherwise only sizes and times are kept.
	RecordInput bool
}

// Executor is the job table: it decides what may run (caps, idempotency),
// records each execution as a Job and forgets finished ones (retention). The
// processes themselves are run by its runner. It is safe for concurrent use.
type Executor struct {
	log     *slog.Logger
	opts    Options
	now     func() time.Time
	run     *proc.Runner
	base    *baseEnv // the fixed part of every environment (all but the request's env and the overlay)
	ttyBase *baseEnv // base for terminal jobs: TERM from Options.Term, no NO_COLOR
	ids     *ids.Source
	jobsDir string
	m       *metrics

	mu        sync.Mutex
	closed    bool
	jobs      map[string]*Job
	idem      map[idemScope]*idemEntry
	running   int
	bgRunning map[string]int
	finished  []finishedJob
	reserved  map[string]*Job // reserved, not started: not listed, but holding a slot
	lastID    string          // the last id drawn for a job (spares must sort after it)
	spoolUsed int64           // bytes granted to spools of recorded jobs (Options.SpoolTotalBytes)

	stopJanitor chan struct{}
	janitorDone chan struct{}
	adoptDone   chan struct{} // closed when the runner's WatchAdopted returns; nil if it never ran
	closeOnce   sync.Once

	idemMu  sync.Mutex // guards idemLog; taken before mu, never while holding it
	idemLog *idemLog

	index runIndex // the running index (recover_linux.go)
}

type finishedJob struct {
	job *Job
	at  time.Time
}

// New returns an Executor. It resolves bash on the server's PATH, prepares
// <Home>/jobs (removing spool files left by an earlier run: jobs do not
// survive a restart) and computes the inherited part of every child's
// environment once. It returns ErrInvalidOptions for an invalid policy or
// Home, and an error if bash is not found or metrics cannot be registered.
func New(opts Options) (*Executor, error) {
	CloseInheritedOnExec()
	if err := normalize(&opts); err != nil {
		return nil, err
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	m, err := newMetrics(opts.Registerer)
	if err != nil {
		return nil, err
	}
	m.spoolBudget.Set(float64(opts.SpoolTotalBytes))
	e := &Executor{
		log:         log,
		opts:        opts,
		now:         opts.Now,
		ids:         ids.NewSource(opts.Now),
		m:           m,
		jobs:        make(map[string]*Job),
		idem:        make(map[idemScope]*idemEntry),
		reserved:    make(map[string]*Job),
		bgRunning:   make(map[string]int),
		stopJanitor: make(chan struct{}),
		janitorDone: make(chan struct{}),
	}
	if opts.Home != "" {
		e.jobsDir = filepath.Join(opts.Home, "jobs")
		if err := prepareJobsDir(e.jobsDir, log); err != nil {
			return nil, err
		}
	}
	if e.run, err = proc.NewRunner(proc.Config{
		Logger:      log,
		Grace:       opts.Grace,
		Containment: opts.Containment,
		Home:        opts.Home,
		NoCgroupV1:  opts.NoCgroupV1,
		Spawned:     func(d time.Duration) { m.spawn.Observe(d.Seconds()) },
	}); err != nil {
		return nil, err
	}
	e.base = newBaseEnv(opts.Policy, opts.Environ, TerminalEnv())
	e.ttyBase = newBaseEnv(opts.Policy, opts.Environ, TTYEnv(opts.Term))
	if err := e.recoverLost(); err != nil {
		return nil, fmt.Errorf("recover jobs of a previous run: %w", err)
	}
	// After recovery: the spares must not be taken for leftovers.
	e.run.StartSpares(func() string { return e.ids.New(e.opts.IDPrefix) })
	if err := e.openIdem(); err != nil {
		return nil, fmt.Errorf("load idempotency keys: %w", err)
	}
	go e.janitor()
	if e.run.Subreaper() && e.indexDir() != "" {
		e.adoptDone = make(chan struct{})
		go e.run.WatchAdopted(filepath.Join(e.indexDir(), proc.AdoptedFile), e.stopJanitor, e.adoptDone)
	}
	return e, nil
}

func normalize(o *Options) error {
	if o.IDPrefix == "" {
		o.IDPrefix = "job_"
	}
	if !strings.HasPrefix(o.IDPrefix, "job_") || strings.ContainsAny(o.IDPrefix, "/?#%") {
		return fmt.Errorf("%w: job id prefix %q must start with job_ and be URL-safe", ErrInvalidOptions, o.IDPrefix)
	}
	if !o.Policy.Inherit.Valid() {
		return fmt.Errorf("%w: inherit policy %q (want all, core or none)", ErrInvalidOptions, o.Policy.Inherit)
	}
	for k, v := range o.Policy.Set {
		if !validEnvName(k) || strings.IndexByte(v, 0) >= 0 {
			return fmt.Errorf("%w: set %q: malformed name or NUL in value", ErrInvalidOptions, k)
		}
		if shellenv.IsManaged(k) {
			return fmt.Errorf("%w: set %q: names starting with %s are managed by dshd", ErrInvalidOptions, k, shellenv.Prefix)
		}
	}
	if o.Home != "" && !filepath.IsAbs(o.Home) {
		return fmt.Errorf("%w: home %q is not absolute", ErrInvalidOptions, o.Home)
	}
	if o.DefaultCwd == "" {
		wd, err := os.Getwd()
		if err != nil {
			return fmt.Errorf("default cwd: %w", err)
		}
		o.DefaultCwd = wd
	}
	if !filepath.IsAbs(o.DefaultCwd) {
		return fmt.Errorf("%w: default cwd %q is not absolute", ErrInvalidOptions, o.DefaultCwd)
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&o.DefaultTimeout, DefaultTimeout)
	def(&o.MaxTimeout, DefaultMaxTimeout)
	def(&o.Grace, DefaultGrace)
	if o.Grace > MaxGrace {
		return fmt.Errorf("%w: grace %s exceeds the maximum %s", ErrInvalidOptions, o.Grace, MaxGrace)
	}
	def(&o.Retention, DefaultRetention)
	def(&o.IdempotencyWindow, DefaultIdempotencyWindow)
	if o.CaptureBytes <= 0 {
		o.CaptureBytes = DefaultCaptureBytes
	}
	if o.SpoolMaxBytes <= 0 {
		o.SpoolMaxBytes = DefaultSpoolMaxBytes
	}
	if o.SpoolTotalBytes <= 0 {
		o.SpoolTotalBytes = DefaultSpoolTotalBytes
	}
	if o.MaxRunning <= 0 {
		o.MaxRunning = DefaultMaxRunning
	}
	if o.MaxBackgroundPerAgent <= 0 {
		o.MaxBackgroundPerAgent = DefaultMaxBackgroundPerAgent
	}
	if o.RetainMax <= 0 {
		o.RetainMax = DefaultRetainMax
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Term == "" {
		o.Term = DefaultTerm
	}
	if !validTerm(o.Term) {
		return fmt.Errorf("%w: term %q: want letters, digits, '-', '.', '_' or '+'", ErrInvalidOptions, o.Term)
	}
	o.SandboxDefault = o.SandboxDefault.Or(sandbox.Default)
	if err := o.SandboxDefault.ValidateEffective(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidOptions, err)
	}
	return nil
}

func prepareJobsDir(dir string, log *slog.Logger) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create jobs dir: %w", err)
	}
	// Stale spools are deleted by name below: never through a link.
	if fi, err := os.Lstat(dir); err != nil {
		return fmt.Errorf("create jobs dir: %w", err)
	} else if !fi.IsDir() {
		return fmt.Errorf("%w: jobs dir %s is a symbolic link or not a directory", ErrInvalidOptions, dir)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return fmt.Errorf("create jobs dir: %w", err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("read jobs dir: %w", err)
	}
	for _, de := range entries {
		name := de.Name()
		if de.Type().IsRegular() && strings.HasPrefix(name, "job_") &&
			(strings.HasSuffix(name, ".stdout") || strings.HasSuffix(name, ".stderr")) {
			if err := os.Remove(filepath.Join(dir, name)); err != nil {
				log.Warn("remove stale spool file", "path", name, "err", err)
			}
		}
	}
	return nil
}

// NewID returns a fresh job id ("job_" + a time-sortable ULID). Callers that
// need the id before Start (to resolve job.id into the overlay) pass it in
// Spec.ID.
func (e *Executor) NewID() string { return e.ids.New(e.opts.IDPrefix) }

// Spec describes an execution to Start.
type Spec struct {
	// ID is the job id; empty means NewID(). A recorded id is ErrInvalidInput.
	ID string
	// Command is run as `bash -c Command`.
	Command string
	// Cwd is the working directory; empty means Options.DefaultCwd, a
	// relative path is taken relative to it. Callers pass the agent's cwd
	// here when the request has none.
	Cwd string
	// AgentID is the agent the job belongs to, "" for none.
	AgentID string
	// Env is the explicit environment (harness requests only). A name in
	// the managed namespace is ErrManagedKeyInEnv.
	Env map[string]string
	// Stdin is the child's standard input when HasStdin; otherwise the
	// child reads /dev/null.
	Stdin    []byte
	HasStdin bool
	// Timeout: 0 means Options.DefaultTimeout in the foreground (capped at
	// Options.MaxTimeout) and none in the background.
	Timeout time.Duration
	// Background jobs count against Options.MaxBackgroundPerAgent.
	Background bool
	// MayOutlive marks a foreground job that may go on running after the
	// call that started it has returned (a model's yielded or terminal
	// call): it counts against Options.MaxBackgroundPerAgent from its start,
	// as a background job does, so that yielding cannot go around the cap.
	MayOutlive bool
	// Managed is the overlay Start applies last (Reserve ignores it; the
	// pipeline passes its overlay to Reservation.Start instead).
	Managed shellenv.Overlay
	// IdempotencyKey, scoped to AgentID, makes the execution happen at most
	// once within Options.IdempotencyWindow (see idem.go): a Start with the
	// key and fingerprint of a started job returns that job and runs
	// nothing; another fingerprint is ErrIdempotencyKeyReused.
	IdempotencyKey string
	// IdempotencyFingerprint identifies the request that defines the
	// execution (the caller hashes its canonical form); "" means one
	// computed from the fields of this Spec.
	IdempotencyFingerprint string
	// Limits override Options.Limits field by field (zero: the default).
	// Only the harness sets them, never a model. They are taken as valid
	// (limits.Limits.Validate): the caller validates them, as run's
	// pipeline does for every execution.
	Limits Limits
	// Sandbox is the job's sandbox policy; empty fields take
	// Options.SandboxDefault. Only the harness sets it, never a model. It
	// is taken as valid (sandbox.Policy.ValidateEffective, once completed):
	// the caller validates it, as run's pipeline does; Reserve checks only
	// that this host can enforce it (sandbox.Host.Check).
	Sandbox sandbox.Policy
	// WritableRoots are the roots the harness chose (the agent's
	// workspace), writable under sandbox.WorkspaceWrite and visible under
	// sandbox.ReadOnly. Cwd is not among them unless CwdIsRoot is set.
	WritableRoots []string
	// View, if set, is the agent's snapshot workspace: the job's mount
	// namespace mounts it at its target before anything else (see
	// sandbox.Host.StartIn). The caller keeps View.FD open until the job
	// is done.
	View *sandbox.View
	// CwdIsRoot makes the job's cwd one of its writable roots too. Only the
	// harness's own cwd may be: a model's workdir is a place to start in,
	// inside the view the harness's roots make, never a new root.
	CwdIsRoot bool
	// TTY runs the command in a new pseudo-terminal of Cols×Rows cells (0:
	// DefaultCols, DefaultRows; at most MaxTerminalSize), with TERM set to
	// Options.Term and without NO_COLOR. Its output is one stream, Stdout;
	// its input stays open for WriteInput; Stdin, if given, is written to
	// the terminal first.
	TTY        bool
	Cols, Rows int
	// OpenStdin keeps a pipe job's stdin open after Stdin is written, for
	// WriteInput, until CloseInput or the job's end.
	OpenStdin bool
}

// Lookup returns the recorded job that agentID started with
// idempotencyKey, if any. A job still being spawned is waited for (fork and
// exec, bounded), and one whose spawn failed is not reported: it never ran
// and is not recorded.
func (e *Executor) Lookup(agentID, idempotencyKey string) (*Job, bool) {
	j, ok := e.idemJob(agentID, idempotencyKey)
	if !ok {
		return nil, false
	}
	if _, err := j.awaitStart(context.Background()); err != nil {
		return nil, false
	}
	return j, true
}

// idemJob returns the job registered with key, whether or not its spawn
// has completed.
func (e *Executor) idemJob(agentID, key string) (*Job, bool) {
	if key == "" {
		return nil, false
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	ent, ok := e.idem[idemScope{agentID, key}]
	if !ok || ent.job == nil {
		return nil, false
	}
	return ent.job, true
}

// Start reserves s and starts it with s.Managed as the overlay: Reserve,
// then Reservation.Start. It returns as soon as the process is started (use
// Job.Wait for the end). The job's life is not tied to ctx, which only
// aborts waiting for a concurrent start with the same idempotency key.
//
// Errors: those of Reserve and of Reservation.Start.
func (e *Executor) Start(ctx context.Context, s Spec) (*Job, error) {
	r, err := e.Reserve(ctx, s)
	if err != nil {
		return nil, err
	}
	return r.Start(s.Managed)
}

var errIdempotentHit = errors.New("idempotency key hit")

// awaitStart waits for the spawn of a job found by idempotency key.
func (j *Job) awaitStart(ctx context.Context) (*Job, error) {
	if j.started != nil {
		select {
		case <-j.started:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	err := j.proc.StartErr()
	if err != nil {
		return nil, fmt.Errorf("start job %s: %w", j.id, err)
	}
	return j, nil
}

func validateSpec(s *Spec) error {
	if s.Command == "" {
		return fmt.Errorf("%w: empty command", ErrInvalidInput)
	}
	if hasNUL(s.Command) || hasNUL(s.Cwd) {
		return fmt.Errorf("%w: NUL byte in command or cwd", ErrInvalidInput)
	}
	if len(s.Command) > MaxArgBytes {
		return fmt.Errorf("%w: the command is %d bytes; at most %d are allowed", ErrTooLarge, len(s.Command), MaxArgBytes)
	}
	if s.Timeout < 0 {
		return fmt.Errorf("%w: negative timeout", ErrInvalidInput)
	}
	if !s.TTY && (s.Cols != 0 || s.Rows != 0) {
		return fmt.Errorf("%w: cols and rows need tty", ErrInvalidInput)
	}
	if s.Cols < 0 || s.Cols > MaxTerminalSize || s.Rows < 0 || s.Rows > MaxTerminalSize {
		return fmt.Errorf("%w: cols and rows must be within 1 and %d", ErrInvalidInput, MaxTerminalSize)
	}
	for k, v := range s.Env {
		if shellenv.IsManaged(k) {
			return fmt.Errorf("%w: %s (names starting with %s are set by dshd only)", ErrManagedKeyInEnv, k, shellenv.Prefix)
		}
		if !validEnvName(k) || hasNUL(v) {
			return fmt.Errorf("%w: env %q: malformed name or NUL in value", ErrInvalidInput, k)
		}
		if n := len(k) + 1 + len(v); n > MaxArgBytes {
			return fmt.Errorf("%w: env %q is %d bytes; at most %d are allowed", ErrTooLarge, k, n, MaxArgBytes)
		}
	}
	return nil
}

func validateManaged(managed shellenv.Overlay) error {
	for _, kv := range managed.All() {
		if hasNUL(kv.Value) {
			return fmt.Errorf("%w: NUL byte in managed value", ErrInvalidInput)
		}
	}
	return nil
}

func hasNUL(s string) bool { return strings.IndexByte(s, 0) >= 0 }

// validTerm reports whether t can be a terminal type name.
func validTerm(t string) bool {
	if len(t) > 64 {
		return false
	}
	for _, c := range t {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("-._+", c)
		if !ok {
			return false
		}
	}
	return true
}

// ResolveCwd returns the directory a job asking for cwd runs in: the
// default directory for "", cwd itself when absolute, else cwd under the
// default. It does not check that the directory exists (Start does).
func (e *Executor) ResolveCwd(cwd string) string {
	switch {
	case cwd == "":
		return e.opts.DefaultCwd
	case filepath.IsAbs(cwd):
		return cwd
	}
	return filepath.Join(e.opts.DefaultCwd, cwd)
}

// register checks caps and records j as running. On an idempotency hit it
// returns errIdempotentHit with j.existing set. It returns jobs pruned by
// retention, whose files the caller removes outside the lock.
func (e *Executor) register(j *Job) ([]*Job, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return nil, ErrClosed
	}
	now := e.now()
	if j.idemKey != "" {
		if err := e.idemLookupLocked(j, now); err != nil {
			return nil, err
		}
	}
	removed := e.pruneLocked(now)
	if e.running >= e.opts.MaxRunning {
		return removed, &TooManyJobsError{Limit: "global", Max: e.opts.MaxRunning, RetryAfter: retryAfter}
	}
	if j.countsAgainstAgent() && e.bgRunning[j.agentID] >= e.opts.MaxBackgroundPerAgent {
		return removed, &TooManyJobsError{Limit: "agent", Max: e.opts.MaxBackgroundPerAgent, RetryAfter: retryAfter}
	}
	if j.id == "" {
		if id, g := e.run.TakeSpare(e.lastID); g != nil {
			j.id, j.spare = id, g
		} else {
			j.id = e.ids.New(e.opts.IDPrefix)
		}
		e.lastID = j.id
	} else if _, ok := e.jobs[j.id]; ok {
		return removed, fmt.Errorf("%w: job id %s is taken", ErrInvalidInput, j.id)
	}
	if _, ok := e.reserved[j.id]; ok {
		return removed, fmt.Errorf("%w: job id %s is taken", ErrInvalidInput, j.id)
	}
	e.reserved[j.id] = j
	if j.idemKey != "" {
		e.idem[idemScope{j.agentID, j.idemKey}] = &idemEntry{jobID: j.id, fingerprint: j.idemFP, at: now, job: j}
	}
	e.running++
	if j.countsAgainstAgent() {
		e.bgRunning[j.agentID]++
	}
	return removed, nil
}

// unregister undoes register after a failed spawn or a release: the job
// never ran, so its idempotency key is forgotten too.
func (e *Executor) unregister(j *Job) {
	e.mu.Lock()
	if g := j.spare; g != nil {
		// Made for a job that never started.
		j.spare = nil
		defer func() {
			_ = g.Remove()
			e.run.RefillSpares()
		}()
	}
	delete(e.reserved, j.id)
	delete(e.jobs, j.id)
	persisted := false
	if sc := (idemScope{j.agentID, j.idemKey}); j.idemKey != "" {
		if ent, ok := e.idem[sc]; ok && ent.job == j {
			persisted = ent.persisted
			delete(e.idem, sc)
		}
	}
	e.releaseLocked(j)
	e.mu.Unlock()
	e.idemDel(j, persisted)
}

func (e *Executor) releaseLocked(j *Job) {
	e.running--
	if j.countsAgainstAgent() {
		if e.bgRunning[j.agentID]--; e.bgRunning[j.agentID] <= 0 {
			delete(e.bgRunning, j.agentID)
		}
	}
}

// jobFinished updates accounting when j ended; it runs before j's done is
// closed, so a caller that saw done can start a job in its place.
//
// A job whose leader left processes behind keeps its running slot, counts
// as a background job of its agent, and is neither pruned nor evicted (so
// it stays listed and cancellable) until the last of them is gone
// (remainderGone).
func (e *Executor) jobFinished(j *Job, state State) {
	held := j.proc.Lingering()
	if !held {
		e.indexRemove(j)
	}
	now := e.now()
	e.mu.Lock()
	if held {
		if !j.countsAgainstAgent() && j.agentID != "" {
			j.heldAsBg = true
			e.bgRunning[j.agentID]++
		}
	} else {
		e.releaseLocked(j)
		e.finished = append(e.finished, finishedJob{job: j, at: now})
	}
	removed := e.pruneLocked(now)
	e.mu.Unlock()
	e.m.running.Dec()
	e.m.finished(state)
	e.removeJobs(removed)
	if e.log.Enabled(context.Background(), slog.LevelDebug) {
		e.log.Debug("job finished", "job_id", j.id, "state", state)
	}
}

// remainderGone releases what a job held while processes outlived its
// leader, once the last of them is gone, and hands it to retention.
func (e *Executor) remainderGone(j *Job) {
	e.indexRemove(j)
	now := e.now()
	e.mu.Lock()
	e.releaseLocked(j)
	e.finished = append(e.finished, finishedJob{job: j, at: now})
	removed := e.pruneLocked(now)
	e.mu.Unlock()
	e.removeJobs(removed)
}

// pruneLocked forgets finished jobs beyond Retention or RetainMax and
// returns them for removeJobs.
func (e *Executor) pruneLocked(now time.Time) []*Job {
	var removed []*Job
	for len(e.finished) > 0 {
		f := e.finished[0]
		if len(e.finished) <= e.opts.RetainMax && now.Sub(f.at) < e.opts.Retention {
			break
		}
		e.finished[0] = finishedJob{}
		e.finished = e.finished[1:]
		e.forgetLocked(f.job)
		removed = append(removed, f.job)
	}
	return removed
}

// forgetLocked drops a finished job from the table and gives its spool
// bytes back to the budget; the caller removes its files (removeJobs).
func (e *Executor) forgetLocked(j *Job) {
	delete(e.jobs, j.id)
	if ent, ok := e.idem[idemScope{j.agentID, j.idemKey}]; ok && j.idemKey != "" && ent.job == j {
		ent.job = nil // the key outlives its job for its window: it never runs again
	}
	e.spoolUsed -= j.spoolBytes
	j.spoolBytes = 0
	e.m.spoolUsed.Set(float64(e.spoolUsed))
}

// reserveSpool grants j up to n bytes of the total spool budget. When the
// budget lacks room it evicts finished jobs holding spool bytes, oldest
// first, until it has room or none is left; it may grant less than n.
func (e *Executor) reserveSpool(j *Job, n int64) int64 {
	var evicted []*Job
	e.mu.Lock()
	if room := e.opts.SpoolTotalBytes - e.spoolUsed; room < n {
		evicted = e.evictLocked(n - room)
	}
	granted := min(n, max(e.opts.SpoolTotalBytes-e.spoolUsed, 0))
	e.spoolUsed += granted
	j.spoolBytes += granted
	e.m.spoolUsed.Set(float64(e.spoolUsed))
	e.mu.Unlock()
	if len(evicted) > 0 {
		e.m.spoolEvicted.Add(float64(len(evicted)))
		e.log.Info("spool budget: evicted finished jobs", "count", len(evicted), "for_job", j.id)
		e.removeJobs(evicted)
	}
	return granted
}

// releaseSpool gives back bytes granted to j but never written.
func (e *Executor) releaseSpool(j *Job, n int64) {
	e.mu.Lock()
	e.spoolUsed -= n
	j.spoolBytes -= n
	e.m.spoolUsed.Set(float64(e.spoolUsed))
	e.mu.Unlock()
}

// evictLocked forgets finished jobs that hold spool bytes, oldest first,
// until need bytes are free or none is left, and returns them for
// removeJobs.
func (e *Executor) evictLocked(need int64) []*Job {
	var evicted []*Job
	var freed int64
	e.finished = slices.DeleteFunc(e.finished, func(f finishedJob) bool {
		if freed >= need || f.job.spoolBytes == 0 {
			return false
		}
		freed += f.job.spoolBytes
		e.forgetLocked(f.job)
		evicted = append(evicted, f.job)
		return true
	})
	return evicted
}

func (e *Executor) removeJobs(js []*Job) {
	for _, j := range js {
		j.remove()
	}
}

// prune applies retention now; the janitor calls it periodically.
func (e *Executor) prune() {
	e.mu.Lock()
	now := e.now()
	removed := e.pruneLocked(now)
	e.idemPruneLocked(now)
	e.mu.Unlock()
	e.removeJobs(removed)
	e.run.SweepLingering(false)
}

func (e *Executor) janitor() {
	defer close(e.janitorDone)
	every := min(max(e.opts.Retention/4, 100*time.Millisecond), time.Minute)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			e.prune()
			e.idemMaybeCompact()
		case <-e.stopJanitor:
			return
		}
	}
}

// Job returns the recorded job with the given id, or ErrJobNotFound.
func (e *Executor) Job(id string) (*Job, error) {
	e.mu.Lock()
	j, ok := e.jobs[id]
	e.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("job %s: %w", id, ErrJobNotFound)
	}
	return j, nil
}

// Jobs returns snapshots of the recorded jobs of agentID in state, sorted by
// id; "" matches any agent or state.
func (e *Executor) Jobs(agentID string, state State) []Snapshot {
	e.mu.Lock()
	js := make([]*Job, 0, len(e.jobs))
	for _, j := range e.jobs {
		if agentID == "" || j.agentID == agentID {
			js = append(js, j)
		}
	}
	e.mu.Unlock()
	out := make([]Snapshot, 0, len(js))
	for _, j := range js {
		if s := j.Snapshot(); state == "" || s.State == state {
			out = append(out, s)
		}
	}
	slices.SortFunc(out, func(a, b Snapshot) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// Busy counts, for agentIDs, their running jobs and their finished jobs
// whose processes outlived the leader (Lingers(settle), counted now): what
// may still write their files. Unlike Jobs it copies nothing of a job and
// looks at a finished one under its own lock only, so its cost per job
// recorded is a few loads, however many the agents have run.
func (e *Executor) Busy(agentIDs []string, settle time.Duration) int {
	e.mu.Lock()
	var js []*Job
	for _, j := range e.jobs {
		if slices.Contains(agentIDs, j.agentID) {
			js = append(js, j)
		}
	}
	e.mu.Unlock()
	n := 0
	for _, j := range js {
		j.mu.Lock()
		running := j.state == StateRunning
		j.mu.Unlock()
		if running || j.Lingers(settle) {
			n++
		}
	}
	return n
}

// Cancel stops a running job through the kill path (SIGTERM the group, the
// grace, SIGKILL) and waits until it is finished or ctx is done; the job
// ends in StateCancelled. Cancelling a finished job changes nothing but
// its Remaining: processes that outlived its leader go through the same
// kill path, and Cancel waits until they are gone. It
// returns ErrJobNotFound for an unknown id, and ctx's error (with the
// current snapshot) if ctx ends first.
func (e *Executor) Cancel(ctx context.Context, id string) (Snapshot, error) {
	j, err := e.Job(id)
	if err != nil {
		return Snapshot{}, err
	}
	j.proc.Stop(proc.StopCancel)
	snap, err := j.Wait(ctx)
	if err != nil || !j.proc.StopRemainder() {
		return snap, err
	}
	// The leader had exited, leaving processes behind: they go through the
	// kill path, and the job's slot is freed as soon as they are gone.
	if !j.proc.WaitKilled(ctx.Done()) {
		return j.Snapshot(), ctx.Err()
	}
	// A SIGKILL at the grace's end takes a moment to empty the group.
	tick := time.NewTicker(proc.GroupPollInterval)
	defer tick.Stop()
	for deadline := time.Now().Add(proc.ForceKillWait); j.proc.JobAlive() && time.Now().Before(deadline); {
		select {
		case <-ctx.Done():
			return j.Snapshot(), ctx.Err()
		case <-tick.C:
		}
	}
	e.run.SweepLingering(false)
	return j.Snapshot(), nil
}

// Close stops every running job and hook process through the kill path
// and waits for them, including the grace-period SIGKILL of their groups.
// It also SIGKILLs the process groups of finished jobs whose descendants
// outlived the leader, and removes all spool files. Start and RunProcess
// return ErrClosed afterwards. Close may be called more than once.
//
// Close always ends with every group killed: if ctx ends before the kill
// paths have run their course (a grace longer than the caller's budget),
// every remaining group is sent SIGKILL at once and Close waits, at most
// proc.ForceKillWait, for the leaders to be reaped; it then returns an error
// wrapping ctx's that says so.
func (e *Executor) Close(ctx context.Context) error {
	e.mu.Lock()
	e.closed = true
	e.mu.Unlock()
	e.closeOnce.Do(func() { close(e.stopJanitor) })

	cutShort := e.run.StopAll(ctx)
	<-e.janitorDone

	e.mu.Lock()
	js := make([]*Job, 0, len(e.jobs))
	for _, j := range e.jobs {
		js = append(js, j)
	}
	e.mu.Unlock()
	if err := e.run.Close(ctx); err != nil {
		return errors.Join(cutShort, fmt.Errorf("close executor: %w", err))
	}
	if e.adoptDone != nil {
		// Every adopted process was killed: the record has nothing left
		// for a next start.
		<-e.adoptDone
		if err := proc.ForgetAdopted(filepath.Join(e.indexDir(), proc.AdoptedFile)); err != nil {
			e.log.Warn("remove the record of adopted processes", "err", err)
		}
	}
	e.removeJobs(js)
	e.index.close()
	e.idemMu.Lock()
	if e.idemLog != nil {
		e.idemLog.close()
	}
	e.idemMu.Unlock()
	return cutShort
}
