package exec

import (
	"context"
	"fmt"
	"os"
	osexec "os/exec"
	"strings"
	"testing"
	"time"
)

// inheritedChildEnv makes the test binary, started again by
// TestNewClosesInherited, the process that inherited a descriptor.
const inheritedChildEnv = "DSHD_TEST_INHERITED_CHILD"

// inheritedProbe says whether the shell running it holds descriptor 3.
const inheritedProbe = `[ -e /proc/$$/fd/3 ] && echo open || echo closed`

// TestNewClosesInherited: starting an executor marks every descriptor the
// process inherited close-on-exec, before its first job or hook, whatever
// the program around it did or did not do first. The test binary is started
// again with a file open as its descriptor 3 without close-on-exec (as
// `dshd 3>>harness.log` would be): there a child started before New has
// it (the baseline), and a job and a hook process started after it do not.
// One process only: the marking is once per process.
func TestNewClosesInherited(t *testing.T) {
	f, err := os.CreateTemp(t.TempDir(), "inherited")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cmd := osexec.Command(os.Args[0], "-test.run=^TestInheritedChild$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), inheritedChildEnv+"=1")
	cmd.ExtraFiles = []*os.File{f} // its descriptor 3, open across exec
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	for _, want := range []string{"baseline: open", "job: closed", "process: closed"} {
		if !strings.Contains(string(out), "\n"+want+"\n") {
			t.Errorf("child did not print %q:\n%s", want, out)
		}
	}
}

// TestInheritedChild is TestNewClosesInherited's child; it does nothing
// unless started by it.
func TestInheritedChild(t *testing.T) {
	if os.Getenv(inheritedChildEnv) != "1" {
		t.Skip("runs only as TestNewClosesInherited's child")
	}
	var base strings.Builder
	probe := osexec.Command("bash", "-c", inheritedProbe)
	probe.Stdout = &base
	if err := probe.Run(); err != nil {
		t.Fatal(err)
	}
	fmt.Printf("\nbaseline: %s", base.String())

	e := newTestExecutor(t, nil)
	job := mustRun(t, e, Spec{Command: inheritedProbe})
	fmt.Printf("\njob: %s", job.Stdout.Text)
	ctx, cancel := context.WithTimeout(context.Background(), testDeadline)
	defer cancel()
	res, err := e.RunProcess(ctx, ProcessSpec{Command: inheritedProbe, Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("\nprocess: %s\n", res.Stdout)
}
