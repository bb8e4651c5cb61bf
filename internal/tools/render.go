package tools

import (
	"fmt"
	"strings"

	"github.com/dshd/dshd/internal/exec"
)

// RenderResult renders a job snapshot as the text a model reads (DESIGN §5):
// stdout, then a "[stderr]" line and stderr, then markers on their own lines,
// in this order:
//
//	[output truncated; full output: GET /jobs/<id>/output]
//	[timed out after Nms]
//	[killed by signal: S]
//	[exit code: N]
//
// The exit code marker is omitted for 0 and when the job was killed by a
// signal. A job that is still running ends with "[still running: job <id>]".
// "(no output)" stands for a result that would otherwise be empty. The
// trailing newline of the output is dropped.
func RenderResult(snap exec.Snapshot) string {
	var b strings.Builder
	line := func(s string) {
		b.WriteString(s)
		if !strings.HasSuffix(s, "\n") {
			b.WriteByte('\n')
		}
	}
	if snap.Stdout.Text != "" {
		line(snap.Stdout.Text)
	}
	if snap.Stderr.Text != "" {
		line("[stderr]")
		line(snap.Stderr.Text)
	}
	if snap.Stdout.Truncated || snap.Stderr.Truncated {
		line(fmt.Sprintf("[output truncated; full output: GET /jobs/%s/output]", snap.ID))
	}
	if snap.State == exec.StateTimedOut {
		line(fmt.Sprintf("[timed out after %dms]", snap.Timeout.Milliseconds()))
	}
	if snap.Signal != "" {
		line(fmt.Sprintf("[killed by signal: %s]", snap.Signal))
	} else if snap.ExitCode != nil && *snap.ExitCode != 0 {
		line(fmt.Sprintf("[exit code: %d]", *snap.ExitCode))
	}
	if snap.State == exec.StateRunning {
		line(fmt.Sprintf("[still running: job %s]", snap.ID))
	}
	out := strings.TrimSuffix(b.String(), "\n")
	if out == "" {
		return "(no output)"
	}
	return out
}

// StartedText is the result of a bash call that started a background job.
func StartedText(id string) string {
	return "started background job " + id
}
