package run

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/dshd/dshd/internal/exec"
	"github.com/dshd/dshd/internal/tools"
)

// job_output's reads. Each reads one stream of a job as it is at the call
// (later output is not part of it) and returns at most tools.MaxReadBytes
// of it, then a line in brackets saying what was shown and the call that
// reads on. Every byte of the stream that was kept is reachable this way.

// maxMatchLine bounds how much of one line a pattern is matched against
// and shown: longer lines are matched on their first maxMatchLine bytes
// and shown cut, with the offset that reads the rest.
const maxMatchLine = 4 << 10

// outputReader reads a stream of a job (*exec.Job).
type outputReader interface {
	ReadOutput(s exec.Stream, off int64, p []byte) (int, error)
}

// stream is one stream of a job as one read sees it: the bytes [0, size)
// are readable; total counts every byte written (size < total when bytes
// were not kept).
type stream struct {
	r           outputReader
	s           exec.Stream
	name        string // "stdout" or "stderr"
	jobID       string
	size, total int64
	dropReason  string
	running     bool
}

func newStream(r outputReader, jobID, name string, o exec.Output, running bool) *stream {
	st := exec.Stdout
	if name == "stderr" {
		st = exec.Stderr
	}
	return &stream{r: r, s: st, name: name, jobID: jobID, size: o.TotalBytes - o.Dropped, total: o.TotalBytes, dropReason: o.DropReason, running: running}
}

// ReadAt implements io.ReaderAt over the readable bytes.
func (st *stream) ReadAt(p []byte, off int64) (int, error) {
	if off >= st.size {
		return 0, io.EOF
	}
	if rest := st.size - off; int64(len(p)) > rest {
		p = p[:rest]
	}
	got := 0
	for got < len(p) {
		n, err := st.r.ReadOutput(st.s, off+int64(got), p[got:])
		got += n
		if err != nil || n == 0 {
			if got < len(p) {
				return got, io.ErrUnexpectedEOF
			}
			break
		}
	}
	return got, nil
}

// read returns up to n readable bytes from off.
func (st *stream) read(off int64, n int) []byte {
	n = int(min(int64(n), max(st.size-off, 0)))
	buf := make([]byte, n)
	k, _ := st.ReadAt(buf, off)
	return buf[:k]
}

// call is the arguments of the job_output call that reads on at arg = n.
func (st *stream) call(arg string, n int64, more ...string) string {
	return "job_output " + tools.JobOutputCall(st.jobID, st.name, arg, n, more...)
}

// of is " of N" bytes, with "so far" while the job runs.
func (st *stream) of(n int64, unit string) string {
	s := fmt.Sprintf(" of %d %s", n, unit)
	if st.running {
		s += " so far"
	}
	return s
}

// notKept is the note on bytes that were not kept, when the range read
// reaches them; "" otherwise.
func (st *stream) notKept(end int64) string {
	if st.size == st.total || end < st.size {
		return ""
	}
	return fmt.Sprintf("; bytes %d-%d were not kept (%s) and cannot be read", st.size, st.total-1, st.dropReason)
}

// readBytes reads length bytes from off (at most tools.MaxReadBytes). The
// end is moved back to a character boundary when that leaves something, so
// that the next read starts on one.
func (st *stream) readBytes(off, length int64) string {
	b := st.read(off, int(min(length, tools.MaxReadBytes)))
	if len(b) == 0 {
		return fmt.Sprintf("(no output in this range)\n[%s has %d bytes%s%s]", st.name, st.size, st.soFar(), st.notKept(off))
	}
	if cut := completeRunes(b); cut > 0 && off+int64(len(b)) < st.size {
		b = b[:cut]
	}
	end := off + int64(len(b))
	var foot strings.Builder
	fmt.Fprintf(&foot, "[%s bytes %d-%d%s", st.name, off, end-1, st.of(st.size, "bytes"))
	if end < st.size {
		fmt.Fprintf(&foot, "; next: %s", st.call("offset", end))
	}
	foot.WriteString(st.notKept(end) + "]")
	return withFooter(b, foot.String())
}

func (st *stream) soFar() string {
	if st.running {
		return " so far"
	}
	return ""
}

// withFooter is text, a newline unless text ends with one, and foot.
func withFooter(text []byte, foot string) string {
	s := string(text)
	if s != "" && !strings.HasSuffix(s, "\n") {
		s += "\n"
	}
	return s + foot
}

// lineCount is how many lines the stream has: its newlines, plus one for a
// last line without one.
func (st *stream) lineCount() int64 {
	var n int64
	buf := make([]byte, 256<<10)
	var last byte
	for off := int64(0); off < st.size; {
		k, _ := st.ReadAt(buf, off)
		if k == 0 {
			break
		}
		n += int64(bytes.Count(buf[:k], []byte{'\n'}))
		last = buf[k-1]
		off += int64(k)
	}
	if st.size > 0 && last != '\n' {
		n++
	}
	return n
}

// lineStart returns the byte offset where line (from 1) starts; st.size
// when the stream has fewer lines.
func (st *stream) lineStart(line int64) int64 {
	if line <= 1 {
		return 0
	}
	need := line - 1 // newlines to pass
	buf := make([]byte, 256<<10)
	for off := int64(0); off < st.size; {
		k, _ := st.ReadAt(buf, off)
		if k == 0 {
			break
		}
		chunk := buf[:k]
		for {
			i := bytes.IndexByte(chunk, '\n')
			if i < 0 {
				break
			}
			need--
			chunk = chunk[i+1:]
			if need == 0 {
				return off + int64(k-len(chunk))
			}
		}
		off += int64(k)
	}
	return st.size
}

// readLines reads count lines (0: as many as fit) from line first.
func (st *stream) readLines(first, count int64) string {
	total := st.lineCount()
	off := st.lineStart(first)
	if first > total || off >= st.size {
		return fmt.Sprintf("(no line %d)\n[%s has %d lines%s%s]", first, st.name, total, st.soFar(), st.notKept(off))
	}
	return st.showLines(off, first, count, total, "")
}

// showLines shows whole lines from off, the start of line first: count of
// them (0: as many as fit), at most tools.MaxReadBytes. A first line too
// long to fit is shown cut, with the offset that reads on.
func (st *stream) showLines(off, first, count, total int64, earlier string) string {
	b := st.read(off, tools.MaxReadBytes)
	shown, end := int64(0), 0
	for end < len(b) && (count == 0 || shown < count) {
		i := bytes.IndexByte(b[end:], '\n')
		if i < 0 {
			if off+int64(len(b)) < st.size {
				break // the line goes on past what fits
			}
			end = len(b) // the stream's last line, without a newline
		} else {
			end += i + 1
		}
		shown++
	}
	if shown == 0 {
		// One line longer than a read: its first bytes, then where it goes on.
		cut := b[:max(completeRunes(b), 1)]
		next := off + int64(len(cut))
		return withFooter(cut, fmt.Sprintf("[%s line %d%s: its first %d bytes (bytes %d-%d); next: %s%s]",
			st.name, first, st.of(total, "lines"), len(cut), off, next-1, st.call("offset", next), st.notKept(next)))
	}
	last := first + shown - 1
	var foot strings.Builder
	fmt.Fprintf(&foot, "[%s lines %d-%d%s (bytes %d-%d)", st.name, first, last, st.of(total, "lines"), off, off+int64(end)-1)
	if earlier != "" {
		foot.WriteString("; " + earlier)
	}
	if last < total {
		fmt.Fprintf(&foot, "; next: %s", st.call("start_line", last+1))
	}
	foot.WriteString(st.notKept(off+int64(end)) + "]")
	return withFooter(b[:end], foot.String())
}

// readTail reads the last n lines, or as many of them as fit.
func (st *stream) readTail(n int64) string {
	total := st.lineCount()
	if total == 0 {
		return fmt.Sprintf("(no output)\n[%s has no lines%s%s]", st.name, st.soFar(), st.notKept(0))
	}
	first := max(total-n+1, 1)
	off := st.lineStart(first)
	if st.size-off > tools.MaxReadBytes {
		// Too much: the last lines that fit, from the first line start
		// within the last MaxReadBytes bytes.
		from := st.size - tools.MaxReadBytes
		b := st.read(from, tools.MaxReadBytes)
		i := bytes.IndexByte(b, '\n')
		if i < 0 || i == len(b)-1 {
			// The last line alone is longer than a read: its last bytes.
			return st.readBytes(from, tools.MaxReadBytes)
		}
		off = from + int64(i) + 1
		first = total - int64(bytes.Count(b[i+1:], []byte{'\n'}))
		if b[len(b)-1] == '\n' {
			first++
		}
	}
	earlier := ""
	if first > 1 {
		earlier = "earlier lines: " + st.call("start_line", max(first-n, 1), `"line_count":`+strconv.FormatInt(min(n, first-1), 10))
	}
	return st.showLines(off, first, 0, total, earlier)
}

// grep returns the lines from line first on that match re, each as
// "<number>:<line>", at most max of them and tools.MaxReadBytes in all.
func (st *stream) grep(re *regexp.Regexp, first, most int64) string {
	off := st.lineStart(first)
	if first > 1 && off >= st.size {
		return fmt.Sprintf("(no line %d)\n[%s has %d lines%s]", first, st.name, st.lineCount(), st.soFar())
	}
	br := bufio.NewReaderSize(io.NewSectionReader(st, off, st.size-off), 64<<10)
	var out bytes.Buffer
	var matches int64
	no := first
	lineOff := off
	var line []byte
	long := int64(0) // bytes of the current line past what line holds
	stopped := int64(0)
	for {
		chunk, err := br.ReadSlice('\n')
		if room := maxMatchLine - len(line); room > 0 {
			line = append(line, chunk[:min(room, len(chunk))]...)
			long += int64(len(chunk) - min(room, len(chunk)))
		} else {
			long += int64(len(chunk))
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		if len(line) == 0 && err != nil {
			break
		}
		n := int64(len(line)) + long
		text := bytes.TrimSuffix(line, []byte{'\n'})
		if re.Match(text) {
			entry := strconv.FormatInt(no, 10) + ":" + string(text[:completeRunes(text)])
			if long > 0 {
				entry += fmt.Sprintf(" …[line cut: it goes on: %s]", st.call("offset", lineOff+int64(len(line))))
			}
			if out.Len()+len(entry)+1 > tools.MaxReadBytes {
				stopped = no
				break
			}
			out.WriteString(entry + "\n")
			matches++
			if matches == most {
				if lineOff+n < st.size {
					stopped = no + 1
				}
				break
			}
		}
		no++
		lineOff += n
		line, long = line[:0], 0
		if err != nil {
			break
		}
	}
	var foot strings.Builder
	switch {
	case stopped > 0:
		fmt.Fprintf(&foot, "[%s: %d matching lines shown, lines %d-%d searched; next: %s]", st.name, matches, first, stopped-1,
			st.call("start_line", stopped, `"pattern":`+strconv.Quote(re.String())))
	case matches == 0:
		fmt.Fprintf(&foot, "(no line matches)\n[%s lines %d-%d%s searched%s]", st.name, first, no-1, st.of(no-1, "lines"), st.notKept(st.size))
	default:
		fmt.Fprintf(&foot, "[%s: %d matching lines, lines %d-%d%s searched%s]", st.name, matches, first, no-1, st.of(no-1, "lines"), st.notKept(st.size))
	}
	return withFooter(out.Bytes(), foot.String())
}

// completeRunes returns the length of b without a trailing incomplete
// UTF-8 sequence.
func completeRunes(b []byte) int {
	if i := lastRuneStart(b); i >= 0 && !utf8.FullRune(b[i:]) {
		return i
	}
	return len(b)
}
