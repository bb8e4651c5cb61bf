package tools

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/dshd/dshd/internal/exec"
)

func intp(n int) *int { return &n }

func out(s string) exec.Output { return exec.Output{Text: s, TotalBytes: int64(len(s))} }

func TestRenderResult(t *testing.T) {
	tests := []struct {
		name string
		snap exec.Snapshot
		want string
	}{
		{
			name: "exit 0",
			snap: exec.Snapshot{ID: "job_1", State: "exited", ExitCode: intp(0), Stdout: out("hello\n")},
			want: "hello",
		},
		{
			name: "exit 0 without trailing newline",
			snap: exec.Snapshot{ID: "job_1", State: "exited", ExitCode: intp(0), Stdout: out("a\nb")},
			want: "a\nb",
		},
		{
			name: "non-zero exit",
			snap: exec.Snapshot{ID: "job_1", State: "exited", ExitCode: intp(3), Stdout: out("partial\n")},
			want: "partial\n[exit code: 3]",
		},
		{
			name: "stdout and stderr",
			snap: exec.Snapshot{ID: "job_1", State: "exited", ExitCode: intp(1), Stdout: out("out\n"), Stderr: out("err\n")},
			want: "out\n[stderr]\nerr\n[exit code: 1]",
		},
		{
			name: "stderr only",
			snap: exec.Snapshot{ID: "job_1", State: "exited", ExitCode: intp(2), Stderr: out("ls: nope\n")},
			want: "[stderr]\nls: nope\n[exit code: 2]",
		},
		{
			name: "no output",
			snap: exec.Snapshot{ID: "job_1", State: "exited", ExitCode: intp(0)},
			want: "(no output)",
		},
		{
			name: "no output but failed",
			snap: exec.Snapshot{ID: "job_1", State: "exited", ExitCode: intp(1)},
			want: "[exit code: 1]",
		},
		{
			name: "timeout",
			snap: exec.Snapshot{ID: "job_1", State: "timed_out", Signal: "SIGTERM", Timeout: 1500 * time.Millisecond, Stdout: out("tick\n")},
			want: "tick\n[timed out after 1500ms]\n[killed by signal: SIGTERM]",
		},
		{
			name: "truncation",
			snap: exec.Snapshot{ID: "job_9", State: "exited", ExitCode: intp(0),
				Stdout: exec.Output{Text: "head\n…[990 bytes elided]…\ntail\n", TotalBytes: 1000, Truncated: true, ElidedFrom: 5, ElidedTo: 995}},
			want: "head\n…[990 bytes elided]…\ntail\n" +
				`[stdout truncated: bytes 5-994 of 1000 left out; read them with job_output {"jobId":"job_9","offset":5} (up to 65536 bytes a call)]`,
		},
		{
			name: "stderr truncation",
			snap: exec.Snapshot{ID: "job_9", State: "exited", ExitCode: intp(1),
				Stderr: exec.Output{Text: "e", TotalBytes: 1 << 20, Truncated: true, ElidedFrom: 1, ElidedTo: 1 << 20}},
			want: "[stderr]\ne\n" +
				`[stderr truncated: bytes 1-1048575 of 1048576 left out; read them with job_output {"jobId":"job_9","stream":"stderr","offset":1} (up to 65536 bytes a call)]` +
				"\n[exit code: 1]",
		},
		{
			name: "both streams, some bytes not kept",
			snap: exec.Snapshot{ID: "job_9", State: "exited", ExitCode: intp(0),
				Stdout: exec.Output{Text: "o", TotalBytes: 300, Truncated: true, ElidedFrom: 1, ElidedTo: 300, Dropped: 100, DropReason: exec.DropSpoolLimit},
				Stderr: exec.Output{Text: "e", TotalBytes: 50, Truncated: true}},
			want: "o\n[stderr]\ne\n" +
				`[stdout truncated: bytes 1-299 of 300 left out; read them with job_output {"jobId":"job_9","offset":1} (up to 65536 bytes a call); bytes from 200 on were not kept (spool_limit) and cannot be read]` + "\n" +
				`[stderr truncated: 50 bytes in all; read them with job_output {"jobId":"job_9","stream":"stderr","offset":0} (up to 65536 bytes a call)]`,
		},
		{
			name: "signal",
			snap: exec.Snapshot{ID: "job_1", State: "cancelled", Signal: "SIGKILL"},
			want: "[killed by signal: SIGKILL]",
		},
		{
			name: "signal hides exit code",
			snap: exec.Snapshot{ID: "job_1", State: "exited", Signal: "SIGSEGV", ExitCode: intp(139), Stdout: out("x\n")},
			want: "x\n[killed by signal: SIGSEGV]",
		},
		{
			name: "running job",
			snap: exec.Snapshot{ID: "job_4", State: "running", Background: true, Stdout: out("step 1\n")},
			want: "step 1\n[still running: job job_4]",
		},
		{
			name: "running job without output",
			snap: exec.Snapshot{ID: "job_4", State: "running", Background: true},
			want: "[still running: job job_4]",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, RenderResult(tt.snap)); diff != "" {
				t.Errorf("RenderResult (-want +got):\n%s", diff)
			}
		})
	}
}
