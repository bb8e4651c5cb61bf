package run

import (
	"encoding/json"
	"fmt"
	"io"
	"regexp"
	"strings"
	"testing"

	"github.com/dshd/dshd/internal/exec"
	"github.com/dshd/dshd/internal/tools"
)

// bytesOutput is a stream held in memory.
type bytesOutput []byte

func (b bytesOutput) ReadOutput(_ exec.Stream, off int64, p []byte) (int, error) {
	if off >= int64(len(b)) {
		return 0, io.EOF
	}
	return copy(p, b[off:]), nil
}

func memStream(content string, running bool) *stream {
	return newStream(bytesOutput(content), "job_1", "stdout", exec.Output{TotalBytes: int64(len(content))}, running)
}

// numbered is "line 1\n" … "line n\n".
func numbered(n int) string {
	var b strings.Builder
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&b, "line %d\n", i)
	}
	return b.String()
}

var nextCall = regexp.MustCompile(`next: job_output (\{[^}]*\})`)

// next returns the arguments of the call a result says reads on, nil when
// it names none.
func next(tb testing.TB, text string) map[string]any {
	tb.Helper()
	m := nextCall.FindStringSubmatch(text)
	if m == nil {
		return nil
	}
	var args map[string]any
	if err := json.Unmarshal([]byte(m[1]), &args); err != nil {
		tb.Fatalf("next call %s: %v", m[1], err)
	}
	return args
}

// body is a result without its last (footer) line.
func body(text string) string {
	i := strings.LastIndex(text, "\n[")
	if i < 0 {
		return ""
	}
	return text[:i+1]
}

func TestJobOutputReads(t *testing.T) {
	lines := numbered(1000)
	tests := []struct {
		name string
		got  string
		want string
	}{
		{"bytes", memStream(lines, false).readBytes(7, 10), "line 2\nlin\n" +
			`[stdout bytes 7-16 of 8893 bytes; next: job_output {"jobId":"job_1","offset":17}]`},
		{"bytes to the end", memStream(lines, false).readBytes(8880, 100), "99\nline 1000\n[stdout bytes 8880-8892 of 8893 bytes]"},
		{"bytes past the end", memStream(lines, true).readBytes(9000, 10), "(no output in this range)\n[stdout has 8893 bytes so far]"},
		{"lines", memStream(lines, false).readLines(5, 2), "line 5\nline 6\n" +
			`[stdout lines 5-6 of 1000 lines (bytes 28-41); next: job_output {"jobId":"job_1","start_line":7}]`},
		{"lines past the end", memStream(lines, false).readLines(1001, 0), "(no line 1001)\n[stdout has 1000 lines]"},
		{"last line without newline", memStream("a\nb", false).readLines(2, 0), "b\n[stdout lines 2-2 of 2 lines (bytes 2-2)]"},
		{"tail", memStream(lines, false).readTail(2), "line 999\nline 1000\n" +
			`[stdout lines 999-1000 of 1000 lines (bytes 8874-8892); earlier lines: job_output {"jobId":"job_1","start_line":997,"line_count":2}]`},
		{"tail of more than there is", memStream("x\ny\n", true).readTail(5), "x\ny\n[stdout lines 1-2 of 2 lines so far (bytes 0-3)]"},
		{"pattern", memStream(lines, false).grep(regexp.MustCompile(`^line 99\d$`), 1, 200), "990:line 990\n991:line 991\n992:line 992\n993:line 993\n994:line 994\n995:line 995\n996:line 996\n997:line 997\n998:line 998\n999:line 999\n" +
			"[stdout: 10 matching lines, lines 1-1000 of 1000 lines searched]"},
		{"pattern, the first matches", memStream(lines, false).grep(regexp.MustCompile(`7$`), 1, 2), "7:line 7\n17:line 17\n" +
			`[stdout: 2 matching lines shown, lines 1-17 searched; next: job_output {"jobId":"job_1","start_line":18,"pattern":"7$"}]`},
		{"pattern from a line", memStream(lines, false).grep(regexp.MustCompile(`^line 1\d?$`), 5, 200), "10:line 10\n11:line 11\n12:line 12\n13:line 13\n14:line 14\n15:line 15\n16:line 16\n17:line 17\n18:line 18\n19:line 19\n" +
			"[stdout: 10 matching lines, lines 5-1000 of 1000 lines searched]"},
		{"no match", memStream(lines, false).grep(regexp.MustCompile(`zebra`), 1, 200), "(no line matches)\n[stdout lines 1-1000 of 1000 lines searched]"},
		{"bytes not kept", newStream(bytesOutput("abcdef"), "job_1", "stderr", exec.Output{TotalBytes: 10, Dropped: 4, DropReason: exec.DropSpoolLimit}, false).readBytes(2, 100),
			"cdef\n[stderr bytes 2-5 of 6 bytes; bytes 6-9 were not kept (spool_limit) and cannot be read]"},
		{"tail past a long line", memStream(strings.Repeat("x", 70000)+"\nend\n", false).readTail(2), "end\n" +
			`[stdout lines 2-2 of 2 lines (bytes 70001-70004); earlier lines: job_output {"jobId":"job_1","start_line":1,"line_count":1}]`},
		{"tail of one long line", memStream(strings.Repeat("x", 70000), false).readTail(1), strings.Repeat("x", 65536) + "\n[stdout bytes 4464-69999 of 70000 bytes]"},
		{"a character is not split", memStream("aé", false).readBytes(0, 2), `a` + "\n" + `[stdout bytes 0-0 of 3 bytes; next: job_output {"jobId":"job_1","offset":1}]`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.got != tt.want {
				t.Errorf("got:\n%s\nwant:\n%s", tt.got, tt.want)
			}
		})
	}
}

// TestJobOutputEveryByte: following the call each result names reads a
// stream end to end, from a byte read or from a line read, whatever the
// lengths of its lines; and no result holds more than MaxReadBytes of it.
func TestJobOutputEveryByte(t *testing.T) {
	long := strings.Repeat("x", 3*tools.MaxReadBytes+17)
	for name, content := range map[string]string{
		"short lines":         numbered(30000),
		"a line of 3 reads":   "head\n" + long + "\ntail",
		"no newline at all":   long,
		"multibyte":           strings.Repeat("é€😀\n", 20000),
		"one line, then more": long + "\n" + numbered(10),
	} {
		st := memStream(content, false)
		for _, start := range []string{"bytes", "lines"} {
			t.Run(name+" from "+start, func(t *testing.T) {
				res := st.readBytes(0, tools.MaxReadBytes)
				if start == "lines" {
					res = st.readLines(1, 0)
				}
				var got strings.Builder
				for i := 0; ; i++ {
					if i > 10000 {
						t.Fatal("no end")
					}
					b := body(res)
					if len(b) > tools.MaxReadBytes+1 {
						t.Fatalf("read %d: a result of %d bytes", i, len(b))
					}
					off := got.Len()
					args := next(t, res)
					end := len(content)
					switch {
					case args == nil:
					case args["offset"] != nil:
						end = int(args["offset"].(float64))
					default:
						end = int(st.lineStart(int64(args["start_line"].(float64))))
					}
					piece := content[off:end]
					if b != piece && b != piece+"\n" {
						t.Fatalf("read %d: result %.60q…, want the next bytes %.60q…", i, b, piece)
					}
					got.WriteString(piece)
					switch {
					case args == nil:
					case args["offset"] != nil:
						res = st.readBytes(int64(end), tools.MaxReadBytes)
						continue
					default:
						res = st.readLines(int64(args["start_line"].(float64)), 0)
						continue
					}
					break
				}
				if got.String() != content {
					t.Fatalf("read in turn: %d of %d bytes", got.Len(), len(content))
				}
			})
		}
	}
}

// TestJobOutputMatchesInTurn: a pattern with more matches than one result
// holds is read to the end by following the call each result names.
func TestJobOutputMatchesInTurn(t *testing.T) {
	st := memStream(numbered(30000), false)
	re := regexp.MustCompile(`5$`)
	var found int
	res := st.grep(re, 1, 1000)
	for i := 0; i < 100; i++ {
		found += len(regexp.MustCompile(`(?m)^\d+:`).FindAllString(body(res), -1))
		args := next(t, res)
		if args == nil {
			break
		}
		if args["pattern"] != re.String() {
			t.Fatalf("next call %v lacks the pattern", args)
		}
		res = st.grep(re, int64(args["start_line"].(float64)), 1000)
	}
	if found != 3000 {
		t.Errorf("%d matching lines found in turn, want 3000", found)
	}
}

// TestJobOutputTool: the job_output tool over a real job of 206,000 bytes:
// the bash result's truncation line names the call that reads what it left
// out, and that call, with any offset and length, returns exactly those
// bytes; range arguments that mean nothing are an error result.
func TestJobOutputTool(t *testing.T) {
	w := newWorld(t)
	a := w.agent(t)
	// 2,000 lines of 103 bytes: "%05d " then 96 letters.
	res := w.call(t, a.ID, tools.ToolBash, map[string]any{"command": `pad=$(printf 'a%.0s' $(seq 96)); for i in $(seq 2000); do printf '%05d %s\n' $i "$pad"; done`})
	if res.IsError {
		t.Fatalf("bash = %+v", res)
	}
	j, err := w.jobs.Job(res.JobID)
	if err != nil {
		t.Fatal(err)
	}
	all := make([]byte, 206000)
	if n, _ := (&stream{r: j, s: exec.Stdout, size: 206000}).ReadAt(all, 0); n != 206000 || j.Snapshot().Stdout.TotalBytes != 206000 {
		t.Fatalf("the job printed %d bytes, want 206000", n)
	}
	m := regexp.MustCompile(`\[stdout truncated: bytes (\d+)-(\d+) of 206000 left out; read them with job_output (\{[^}]*\})`).FindStringSubmatch(res.Text)
	if m == nil {
		t.Fatalf("bash result ends %q: no truncation line naming a job_output call", res.Text[max(len(res.Text)-300, 0):])
	}
	head, _, _ := strings.Cut(res.Text, "\n…[")
	if from := mustAtoi(t, m[1]); from != len(head) || string(all[:from]) != head {
		t.Errorf("left out from byte %d, want %d (the head's length)", from, len(head))
	}
	cont := w.call(t, a.ID, tools.ToolJobOutput, json.RawMessage(m[3]))
	if from := mustAtoi(t, m[1]); cont.IsError || !strings.HasPrefix(cont.Text, string(all[from:from+tools.MaxReadBytes])) {
		t.Errorf("the named call returns %.100q, want the bytes left out", cont.Text)
	}

	r := w.call(t, a.ID, tools.ToolJobOutput, map[string]any{"jobId": res.JobID, "offset": 100000, "length": 10000})
	if want := string(all[100000:110000]) + "\n[stdout bytes 100000-109999 of 206000 bytes; next: job_output {\"jobId\":\"" + res.JobID + "\",\"offset\":110000}]"; r.IsError || r.Text != want {
		t.Errorf("bytes 100000-109999 = %.200q…, want them and the next call", r.Text)
	}
	r = w.call(t, a.ID, tools.ToolJobOutput, map[string]any{"jobId": res.JobID, "start_line": 1000, "line_count": 2})
	if want := string(all[999*103:1001*103]) + "[stdout lines 1000-1001 of 2000 lines (bytes 102897-103102); next: job_output {\"jobId\":\"" + res.JobID + "\",\"start_line\":1002}]"; r.Text != want {
		t.Errorf("lines 1000-1001 = %q, want %q", r.Text, want)
	}
	r = w.call(t, a.ID, tools.ToolJobOutput, map[string]any{"jobId": res.JobID, "pattern": "^0199[89] ", "stream": "stdout"})
	if !strings.HasPrefix(r.Text, "1998:01998 ") || !strings.Contains(r.Text, "\n1999:01999 ") || !strings.HasSuffix(r.Text, "[stdout: 2 matching lines, lines 1-2000 of 2000 lines searched]") {
		t.Errorf("pattern = %q", r.Text)
	}
	r = w.call(t, a.ID, tools.ToolJobOutput, map[string]any{"jobId": res.JobID, "tail_lines": 1})
	if !strings.HasPrefix(r.Text, "02000 ") || !strings.Contains(r.Text, "[stdout lines 2000-2000 of 2000 lines") {
		t.Errorf("tail = %q", r.Text)
	}

	for _, tt := range []struct {
		args map[string]any
		want string
	}{
		{map[string]any{"offset": 1, "start_line": 2}, "give one of offset, start_line and tail_lines"},
		{map[string]any{"length": 10}, "give offset too"},
		{map[string]any{"line_count": 10}, "give start_line too"},
		{map[string]any{"pattern": "x", "tail_lines": 3}, "pattern searches lines"},
		{map[string]any{"pattern": "("}, "pattern is not a regular expression"},
		{map[string]any{"stream": "stdin"}, "stream must be one of stdout, stderr"},
		{map[string]any{"offset": -1}, "offset must be a non-negative integer"},
	} {
		tt.args["jobId"] = res.JobID
		if r := w.call(t, a.ID, tools.ToolJobOutput, tt.args); !r.IsError || !strings.Contains(r.Text, tt.want) {
			t.Errorf("job_output %v = %+v, want an error result saying %q", tt.args, r, tt.want)
		}
	}
}

func mustAtoi(tb testing.TB, s string) int {
	tb.Helper()
	var n int
	if _, err := fmt.Sscan(s, &n); err != nil {
		tb.Fatal(err)
	}
	return n
}

// BenchmarkJobOutputLines64MiB: line reads scan the stream from its start;
// this is their cost on a stream at the spool limit (64 MiB of short lines).
func BenchmarkJobOutputLines64MiB(b *testing.B) {
	content := strings.Repeat("a line of output, 32 bytes long\n", 2<<20)
	st := memStream(content, false)
	re := regexp.MustCompile(`zebra`)
	for _, bm := range []struct {
		name string
		read func() string
	}{
		{"tail_lines", func() string { return st.readTail(20) }},
		{"start_line middle", func() string { return st.readLines(1<<20, 20) }},
		{"pattern none", func() string { return st.grep(re, 1, 200) }},
	} {
		b.Run(bm.name, func(b *testing.B) {
			for b.Loop() {
				bm.read()
			}
		})
	}
}
