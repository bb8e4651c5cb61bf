package exec

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/dshd/dshd/internal/proc"
	"github.com/dshd/dshd/internal/sandbox"
	"github.com/dshd/dshd/internal/shellenv"
	"github.com/dshd/dshd/internal/stages"
)

// errReleased is the start error of a reservation released unstarted. A
// start waiting on its idempotency key tries again.
var errReleased = errors.New("reservation released")

// Reservation is an execution the job table has accepted but not started:
// its request is validated, its cwd resolved, its id minted and a slot
// claimed under the caps (or, for an idempotency key already in use, the
// job started with it found). It holds its slot until Start or Release;
// until then the job is neither listed nor found by id.
//
// Exactly one of Start and Release takes effect; later calls do nothing
// (Release) or fail (Start). Both are no-ops on an idempotency hit.
type Reservation struct {
	e        *Executor
	j        *Job // nil on an idempotency hit
	existing *Job // the job started earlier with the same key
	env      map[string]string
	stdin    []byte
	hasStdin bool
	openIn   bool

	once sync.Once
}

// Reserve claims everything that can be refused before any slow or external
// work (resolvers, webhooks, hooks) runs for the execution s: it validates s
// (s.Managed is checked by Start; s.Sandbox and s.Limits are the caller's
// to validate, see Spec), checks that this host can enforce its sandbox
// policy (sandbox.ErrUnavailable), resolves its cwd, mints its id (unless
// s.ID is set), honours its idempotency key and claims a slot under
// MaxRunning and MaxBackgroundPerAgent.
//
// With the idempotency key (scoped to s.AgentID) and fingerprint of a
// started job, Reserve returns a reservation whose Existing is that job.
// Validation comes first: an invalid s is refused whatever its key.
//
// Errors: ErrInvalidInput (NUL bytes, malformed env names, empty command,
// negative timeout, a taken id), ErrTooLarge (a command or env entry over
// MaxArgBytes), ErrTimeoutTooLong (a foreground timeout over MaxTimeout),
// ErrManagedKeyInEnv, *TooManyJobsError (ErrTooManyJobs), ErrClosed, ctx's
// error, ErrIdempotencyKeyReused (the key was used for another request),
// ErrIdempotencyKeyInUse (its first request is still being started) or
// ErrIdempotencyJobGone (its job is no longer recorded).
func (e *Executor) Reserve(ctx context.Context, s Spec) (*Reservation, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := validateSpec(&s); err != nil {
		return nil, err
	}
	policy := s.Sandbox.Or(e.opts.SandboxDefault)
	if err := e.opts.Sandbox.Check(policy); err != nil {
		return nil, err
	}
	timeout := s.Timeout
	if !s.Background {
		if timeout > e.opts.MaxTimeout {
			return nil, fmt.Errorf("%w: a foreground timeout of %s exceeds the maximum of %s (run it in the background for longer)", ErrTimeoutTooLong, timeout, e.opts.MaxTimeout)
		}
		if timeout == 0 {
			timeout = e.opts.DefaultTimeout
		}
	}
	limits := s.Limits.Or(e.opts.Limits)
	cwd := e.ResolveCwd(s.Cwd)
	roots := slices.Clip(s.WritableRoots)
	if s.CwdIsRoot {
		roots = append(roots, cwd)
	}
	j := &Job{
		e:          e,
		proc:       e.run.NewProcess(),
		id:         s.ID,
		command:    s.Command,
		agentID:    s.AgentID,
		cwd:        cwd,
		background: s.Background,
		mayOutlive: s.MayOutlive,
		timeout:    timeout,
		idemKey:    s.IdempotencyKey,
		idemFP:     s.IdempotencyFingerprint,
		sandbox:    policy,
		limits:     limits,
		enforce:    e.run.Enforcement(limits),
		roots:      roots,
		view:       s.View,
		createdAt:  e.now(),
		state:      StateRunning,
		openInput:  s.TTY || s.OpenStdin,
	}
	if s.TTY {
		j.terminal = &Terminal{Cols: cmp.Or(s.Cols, DefaultCols), Rows: cmp.Or(s.Rows, DefaultRows), Term: e.opts.Term}
	}
	if j.idemKey != "" {
		j.started = make(chan struct{})
		if j.idemFP == "" {
			j.idemFP = specFingerprint(&s, policy)
		}
	}
	removed, err := e.register(j)
	e.removeJobs(removed)
	if errors.Is(err, errIdempotentHit) {
		prev := j.existing
		j.existing = nil
		return &Reservation{e: e, existing: prev}, nil
	}
	if err != nil {
		return nil, err
	}
	return &Reservation{e: e, j: j, env: s.Env, stdin: s.Stdin, hasStdin: s.HasStdin, openIn: s.OpenStdin}, nil
}

// specFingerprint hashes the fields of s that define the execution, for
// callers that pass no fingerprint of their own; policy is the sandbox
// policy the job would run under.
func specFingerprint(s *Spec, policy sandbox.Policy) string {
	b, _ := json.Marshal(struct {
		Command    string
		Cwd        string
		Env        map[string]string
		Stdin      []byte
		HasStdin   bool
		Timeout    time.Duration
		Background bool
		Limits     Limits
		Sandbox    sandbox.Policy
		TTY        bool
		Cols, Rows int
		OpenStdin  bool
	}{s.Command, s.Cwd, s.Env, s.Stdin, s.HasStdin, s.Timeout, s.Background, s.Limits, policy, s.TTY, s.Cols, s.Rows, s.OpenStdin})
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// ID returns the id the job will have (that of the existing job on an
// idempotency hit).
func (r *Reservation) ID() string {
	if r.existing != nil {
		return r.existing.id
	}
	return r.j.id
}

// Cwd returns the directory the job will run in (resolved, not checked).
func (r *Reservation) Cwd() string {
	if r.existing != nil {
		return r.existing.cwd
	}
	return r.j.cwd
}

// Existing returns the job already started with the reservation's
// idempotency key, if Reserve found one. Nothing is to be started then.
func (r *Reservation) Existing() (*Job, bool) { return r.existing, r.existing != nil }

// Release gives the slot back without running anything: the id and the
// idempotency key are forgotten, and a concurrent request waiting on the
// key tries again.
func (r *Reservation) Release() {
	if r.j == nil {
		return
	}
	r.once.Do(func() {
		r.e.unregister(r.j)
		r.j.proc.Failed(errReleased)
		if r.j.started != nil {
			close(r.j.started)
		}
	})
}

// Start spawns the reserved job with the overlay managed applied last to its
// environment, and records it; it returns as soon as the process is
// started. On an idempotency hit it returns the existing job. On error the
// reservation is released.
//
// Errors: ErrInvalidInput (NUL in a managed value, a reservation already
// used), ErrTooLarge (the command with its whole environment exceeds the
// kernel's argument space), ErrInvalidCwd, ErrClosed, or a spawn error.
func (r *Reservation) Start(managed shellenv.Overlay) (*Job, error) {
	if r.existing != nil {
		return r.existing, nil
	}
	err := fmt.Errorf("start job %s: %w: reservation already used", r.j.id, ErrInvalidInput)
	var job *Job
	r.once.Do(func() { job, err = r.start(managed) })
	return job, err
}

// start is Start's work, in its stages (stages): the managed values
// checked and the idempotency key made durable, the environment built,
// the job moved from reserved to running with its output's capture, then
// the launch.
func (r *Reservation) start(managed shellenv.Overlay) (*Job, error) {
	e, j := r.e, r.j
	t := stages.Start()
	if err := validateManaged(managed); err != nil {
		return r.fail(err)
	}
	if j.idemKey != "" {
		// Durable before the command runs: no crash makes the key run twice.
		if err := e.idemPut(j); err != nil {
			return r.fail(err)
		}
	}
	j.managed = managed
	env, err := r.environ(managed)
	if err != nil {
		return r.fail(err)
	}
	stages.Done(stages.Env, t)

	e.mu.Lock()
	delete(e.reserved, j.id)
	e.jobs[j.id] = j
	contain := e.run.ForJob(j.id, j.limits).WithSpare(j.spare)
	j.spare = nil // the spawn's from here on
	e.mu.Unlock()

	e.initCapture(j)
	if j.timeout > 0 {
		// Armed before the spawn so that finish can read j.timer without a
		// race; a timeout firing before the spawn completes kills right after.
		j.timer = time.AfterFunc(j.timeout, func() { j.proc.Stop(proc.StopTimeout) })
	}

	j.mu.Lock()
	j.startedAt = e.now() // before the spawn: the job may end before start returns
	j.mu.Unlock()
	err = r.launch(env, contain)
	e.run.RefillSpares()
	if err != nil {
		return r.fail(err)
	}
	e.m.started.Inc()
	e.m.running.Inc()
	if j.started != nil {
		close(j.started)
	}
	if e.log.Enabled(context.Background(), slog.LevelDebug) {
		e.log.Debug("job started", "job_id", j.id, "pid", j.proc.PID(), "background", j.background, "agent_id", j.agentID)
	}
	return j, nil
}

// fail undoes a start that failed with err: the job never ran, its slot
// and key are given back, and what waits for its start is told.
func (r *Reservation) fail(err error) (*Job, error) {
	e, j := r.e, r.j
	if j.timer != nil {
		j.timer.Stop()
	}
	e.unregister(j)
	spawnFailed := j.proc.StartErr() != nil // launch already closed done
	if !spawnFailed {
		j.proc.Failed(err)
	}
	j.mu.Lock()
	net := j.net
	j.mu.Unlock()
	if net != nil {
		// The sandbox was built and its proxy served, but the job
		// did not start: nothing will finish it.
		net.Close()
	}
	if j.started != nil {
		close(j.started)
	}
	return nil, fmt.Errorf("start job %s: %w", j.id, err)
}

// environ is the job's environment (docs/design.md#child-environment): the
// executor's fixed part (its terminal one for a terminal job), the
// request's env, the overlay last; with the proxy's variables under an
// allowlist. It fails with ErrTooLarge past the kernel's argument space.
func (r *Reservation) environ(managed shellenv.Overlay) ([]string, error) {
	e, j := r.e, r.j
	base := e.base
	if j.terminal != nil {
		base = e.ttyBase
	}
	env := base.with(r.env, managed.AppendEnv(nil))
	if j.sandbox.Network == sandbox.NetworkAllowlist {
		env = withProxyEnv(env)
	}
	if err := proc.CheckArgSize(j.command, env); err != nil {
		return nil, err
	}
	return env, nil
}

// initCapture readies the capture of j's two streams, their spools
// counted against the executor's budget.
func (e *Executor) initCapture(j *Job) {
	j.stdout.init(e.opts.CaptureBytes, e.opts.SpoolMaxBytes, e.jobsDir, j.id, ".stdout")
	j.stderr.init(e.opts.CaptureBytes, e.opts.SpoolMaxBytes, e.jobsDir, j.id, ".stderr")
	reserve := func(n int64) int64 { return e.reserveSpool(j, n) }
	release := func(n int64) { e.releaseSpool(j, n) }
	j.stdout.reserve, j.stdout.release = reserve, release
	j.stderr.reserve, j.stderr.release = reserve, release
}

// launch hands the job's process to the runner.
func (r *Reservation) launch(env []string, contain proc.ContainSpec) error {
	e, j := r.e, r.j
	return e.run.Launch(j.proc, &proc.Spec{
		Command:     j.command,
		Dir:         j.cwd,
		Env:         env,
		Stdin:       r.stdin,
		HasStdin:    r.hasStdin,
		OpenStdin:   r.openIn,
		TTY:         j.winsize(),
		Stdout:      j.sink(&j.stdout, "stdout"),
		Stderr:      j.sink(&j.stderr, "stderr"),
		OnExit:      j.finish,
		Contain:     contain,
		OnStart:     func(pid int) { e.indexAdd(j, pid) },
		OnRemainder: func() { e.remainderGone(j) },
		Sandbox:     j.sandboxed(),
	})
}
