package tools

import (
	"fmt"
	"strings"

	"github.com/dshd/dshd/internal/exec"
	"github.com/dshd/dshd/internal/stages"
)

// RenderResult renders a job snapshot as the text a model reads
// (docs/design.md#hooks-and-model-tools): stdout, then a "[stderr]" line and stderr, then markers on their own lines,
// in this order:
//
//	[stdout truncated: bytes A-B of N left out; read them with job_output {…}]
//	[stderr truncated: …] (see TruncatedMarker)
//	[timed out after Nms]
//	[killed by signal: S]
//	[exit code: N]
//
// The exit code marker is omitted for 0 and when the job was killed by a
// signal. A job that is still running ends with "[still running: job <id>]".
// "(no output)" stands for a result that would otherwise be empty. The
// trailing newline of the output is dropped.
func RenderResult(snap exec.Snapshot) string {
	defer stages.Done(stages.Render, stages.Start())
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
	if snap.Stdout.Truncated {
		line(TruncatedMarker(snap.ID, "stdout", snap.Stdout))
	}
	if snap.Stderr.Truncated {
		line(TruncatedMarker(snap.ID, "stderr", snap.Stderr))
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

// TruncatedMarker is the line that follows the output of stream ("stdout"
// or "stderr") of job id when o.Truncated: which bytes were left out and
// the job_output call that reads them, and which bytes, if any, were not
// kept at all.
func TruncatedMarker(id, stream string, o exec.Output) string {
	from := o.ElidedFrom
	var b strings.Builder
	fmt.Fprintf(&b, "[%s truncated: ", stream)
	if o.ElidedTo > o.ElidedFrom {
		fmt.Fprintf(&b, "bytes %d-%d of %d left out", o.ElidedFrom, o.ElidedTo-1, o.TotalBytes)
	} else {
		fmt.Fprintf(&b, "%d bytes in all", o.TotalBytes)
	}
	fmt.Fprintf(&b, "; read them with job_output %s (up to %d bytes a call)", JobOutputCall(id, stream, "offset", from), MaxReadBytes)
	if o.Dropped > 0 {
		fmt.Fprintf(&b, "; bytes from %d on were not kept (%s) and cannot be read", o.TotalBytes-o.Dropped, o.DropReason)
	}
	b.WriteByte(']')
	return b.String()
}

// JobOutputCall is the arguments of a job_output call reading stream of
// job id from where the integer argument arg says:
// {"jobId":"…","stream":"stderr","offset":5}. stdout, the default, is not
// named.
func JobOutputCall(id, stream, arg string, n int64, more ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, `{"jobId":%q`, id)
	if stream == "stderr" {
		b.WriteString(`,"stream":"stderr"`)
	}
	fmt.Fprintf(&b, `,%q:%d`, arg, n)
	for _, m := range more {
		b.WriteString("," + m)
	}
	b.WriteByte('}')
	return b.String()
}
