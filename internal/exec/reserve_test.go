package exec

import (
	"errors"
	"testing"

	"github.com/dshd/dshd/internal/testenv"

	"github.com/dshd/dshd/internal/sandbox"
	"github.com/dshd/dshd/internal/shellenv"
)

// TestReservationHoldsSlotUntilStartOrRelease: a reservation counts against
// the caps, is not listed, and gives its slot back when released.
func TestReservationHoldsSlotUntilStartOrRelease(t *testing.T) {
	e := newTestExecutor(t, func(o *Options) { o.MaxRunning = 1 })
	r, err := e.Reserve(testCtx(t), Spec{Command: "echo hi", Cwd: "sub"})
	if err != nil {
		t.Fatal(err)
	}
	if r.ID() == "" || r.Cwd() != e.ResolveCwd("sub") {
		t.Errorf("reservation id %q cwd %q, want an id and %q", r.ID(), r.Cwd(), e.ResolveCwd("sub"))
	}
	if _, err := e.Reserve(testCtx(t), Spec{Command: "true"}); !errors.Is(err, ErrTooManyJobs) {
		t.Fatalf("second reservation under MaxRunning 1 = %v, want ErrTooManyJobs", err)
	}
	if got := e.Jobs("", ""); len(got) != 0 {
		t.Errorf("a reservation is listed: %v", got)
	}
	if _, err := e.Job(r.ID()); !errors.Is(err, ErrJobNotFound) {
		t.Errorf("Job(reserved id) = %v, want ErrJobNotFound", err)
	}
	r.Release()
	r.Release() // a second release changes nothing
	if _, err := r.Start(shellenv.Overlay{}); !errors.Is(err, ErrInvalidInput) {
		t.Errorf("Start after Release = %v, want ErrInvalidInput", err)
	}
	r2, err := e.Reserve(testCtx(t), Spec{Command: "echo $DSH_X"})
	if err != nil {
		t.Fatalf("reserve after release: %v", err)
	}
	j, err := r2.Start(shellenv.NewOverlay(map[string]string{"DSH_X": "managed"}))
	if err != nil {
		t.Fatal(err)
	}
	s, err := j.Wait(testCtx(t))
	if err != nil || s.Stdout.Text != "managed\n" || s.ID != r2.ID() {
		t.Fatalf("started reservation = %+v, %v", s, err)
	}
}

// TestReservationManagedNUL: a managed value with a NUL is refused at Start,
// and the slot is released.
func TestReservationManagedNUL(t *testing.T) {
	e := newTestExecutor(t, func(o *Options) { o.MaxRunning = 1 })
	r, err := e.Reserve(testCtx(t), Spec{Command: "true"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Start(shellenv.NewOverlay(map[string]string{"DSH_X": "\x00"})); !errors.Is(err, ErrInvalidInput) {
		t.Fatalf("Start with NUL = %v, want ErrInvalidInput", err)
	}
	mustRun(t, e, Spec{Command: "true"})
}

// TestReservationIdempotency: a request with the key of a reservation not
// yet started is refused as in use; once released, the key is free again;
// once started, the same request gets the started job, another request is
// refused, and another agent's key of the same name is another key.
func TestReservationIdempotency(t *testing.T) {
	e := newTestExecutor(t, nil)
	first, err := e.Reserve(testCtx(t), Spec{Command: "true", IdempotencyKey: "k"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Reserve(testCtx(t), Spec{Command: "true", IdempotencyKey: "k"}); !errors.Is(err, ErrIdempotencyKeyInUse) {
		t.Fatalf("Reserve while the first is reserved = %v, want ErrIdempotencyKeyInUse", err)
	}
	first.Release()
	second, err := e.Reserve(testCtx(t), Spec{Command: "echo second", IdempotencyKey: "k"})
	if err != nil {
		t.Fatalf("second reservation = %v", err)
	}
	if _, ok := second.Existing(); ok {
		t.Fatal("second reservation found a released job")
	}
	j, err := second.Start(shellenv.Overlay{})
	if err != nil {
		t.Fatal(err)
	}
	third, err := e.Reserve(testCtx(t), Spec{Command: "echo second", IdempotencyKey: "k"})
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := third.Existing(); !ok || got != j {
		t.Fatalf("third reservation Existing = %v, %v; want the started job %s", got, ok, j.ID())
	}
	if got, err := third.Start(shellenv.Overlay{}); err != nil || got != j {
		t.Errorf("Start on an idempotency hit = %v, %v; want the started job", got, err)
	}
	if _, err := e.Reserve(testCtx(t), Spec{Command: "echo third", IdempotencyKey: "k"}); !errors.Is(err, ErrIdempotencyKeyReused) {
		t.Errorf("Reserve with another command = %v, want ErrIdempotencyKeyReused", err)
	}
	other, err := e.Reserve(testCtx(t), Spec{Command: "echo second", AgentID: "agent-b", IdempotencyKey: "k"})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Release()
	if got, ok := other.Existing(); ok {
		t.Errorf("another agent's key found job %s", got.ID())
	}
}

// TestReservationIdempotencySandbox: the same key with another sandbox
// policy is another request, refused rather than answered with the job
// that ran under the first policy.
func TestReservationIdempotencySandbox(t *testing.T) {
	host := sandbox.NewHost(testCtx(t), sandbox.Config{})
	off := sandbox.Policy{FS: sandbox.Unrestricted, Network: sandbox.NetworkOff}
	if err := host.Check(off); err != nil {
		testenv.Need(t, "this host cannot enforce network off: %v", err)
	}
	e := newTestExecutor(t, func(o *Options) { o.Sandbox = host })
	j, err := e.Start(testCtx(t), Spec{Command: "true", IdempotencyKey: "k"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := j.Wait(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Reserve(testCtx(t), Spec{Command: "true", IdempotencyKey: "k", Sandbox: off}); !errors.Is(err, ErrIdempotencyKeyReused) {
		t.Errorf("Reserve with another sandbox policy = %v, want ErrIdempotencyKeyReused", err)
	}
}
