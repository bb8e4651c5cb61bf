package exec

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"unicode/utf8"
)

// capture holds one output stream of a job. While the stream fits in limit
// bytes it lives in mem and no file exists. When it outgrows limit, a spool
// file is created, everything so far is written to it, and memory keeps only
// the first headMax bytes and a ring of the last limit-headMax bytes for Text.
// The spool takes at most spoolMax bytes; later bytes are counted in dropped.
//
// Only the stream's reader goroutine writes (write, spill); everything it
// changes that readers see is changed under the owning Job's mu. File I/O is
// done outside the lock: the spool is append-only and spooled only grows
// after the bytes are in the file, so ReadAt below spooled is always valid.
type capture struct {
	limit    int
	headMax  int
	spoolMax int64
	dir      string // spool directory; "" disables spooling
	id       string // job id; the spool is <dir>/<id><suffix>, named only when created
	suffix   string

	mem  []byte // in-memory mode: the whole stream
	head []byte // spill mode: first headMax bytes
	ring []byte // spill mode: last len(ring) bytes, circular
	rpos int    // next write index in ring
	rlen int    // valid bytes in ring

	total   int64
	spilled bool
	spool   *os.File
	spooled int64
	dropped int64
	reason  string // why bytes were first dropped (a DropReason); under the job lock
	broken  bool   // spool write failed; later bytes are dropped

	// reserve asks the executor's total spool budget for up to n bytes and
	// returns the grant; release gives back what was granted but not
	// written. Both are nil when spooling has no budget (tests).
	reserve func(n int64) int64
	release func(n int64)
	eof     bool   // stream drained and closed
	text    string // final Text, once eof
	textSet bool
	// elidedFrom, elidedTo: the final Output.ElidedFrom and ElidedTo.
	elidedFrom, elidedTo int64
}

func (c *capture) init(limit int, spoolMax int64, dir, id, suffix string) {
	c.limit = limit
	c.headMax = limit / 2
	c.spoolMax = spoolMax
	c.dir = dir
	c.id, c.suffix = id, suffix
}

// fitsInMemory reports, without the lock (only the writer changes these),
// whether n more bytes keep the stream in memory.
func (c *capture) fitsInMemory(n int) bool {
	return !c.spilled && c.total+int64(n) <= int64(c.limit)
}

// appendMem appends b in memory mode. Caller holds the job lock.
func (c *capture) appendMem(b []byte) {
	c.mem = append(c.mem, b...)
	c.total += int64(len(b))
}

// Reasons for dropped output, reported in Output.DropReason.
const (
	// DropNoSpool: spooling is disabled (no home).
	DropNoSpool = "no_spool"
	// DropSpoolLimit: the stream reached Options.SpoolMaxBytes.
	DropSpoolLimit = "spool_limit"
	// DropSpoolBudget: the spools of all jobs reached
	// Options.SpoolTotalBytes, with no finished job left to evict.
	DropSpoolBudget = "spool_budget"
	// DropDiskFull: the file system had no room (ENOSPC or EDQUOT).
	DropDiskFull = "disk_full"
	// DropSpoolError: another I/O error on the spool file.
	DropSpoolError = "spool_error"
)

// spoolWrite writes b to the spool within spoolMax and the total budget,
// outside the job lock. It returns how many bytes were spooled and, when
// that is fewer than len(b), why (a Drop* reason); the rest must be counted
// as dropped. The first call creates the file. Bytes a failed write did
// not store are given back to the budget, and what was stored before the
// failure stays readable: the spool only ever holds whole, correct bytes.
func (c *capture) spoolWrite(b []byte, spooled int64) (int, string, error) {
	if c.dir == "" {
		return 0, DropNoSpool, nil
	}
	if c.broken {
		return 0, "", nil // the reason was given when it broke
	}
	reason := ""
	if room := c.spoolMax - spooled; int64(len(b)) > room {
		reason = DropSpoolLimit
		if room <= 0 {
			return 0, reason, nil
		}
		b = b[:room]
	}
	if c.reserve != nil {
		granted := c.reserve(int64(len(b)))
		if granted < int64(len(b)) {
			reason = DropSpoolBudget
			b = b[:granted]
		}
		if len(b) == 0 {
			return 0, reason, nil
		}
	}
	unreserve := func(written int) {
		if c.release != nil && written < len(b) {
			c.release(int64(len(b) - written))
		}
	}
	if c.spool == nil {
		f, err := os.OpenFile(filepath.Join(c.dir, c.id+c.suffix), os.O_RDWR|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
		if err != nil {
			c.broken = true
			unreserve(0)
			return 0, ioReason(err), fmt.Errorf("create spool: %w", err)
		}
		c.spool = f
	}
	n, err := c.spool.Write(b)
	if err != nil {
		c.broken = true
		unreserve(n)
		return n, ioReason(err), fmt.Errorf("write spool: %w", err)
	}
	return n, reason, nil
}

// ioReason classifies a spool I/O error.
func ioReason(err error) string {
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
		return DropDiskFull
	}
	return DropSpoolError
}

// spill switches to spill mode with b as the first bytes past memory.
// Caller holds the job lock; the spool already holds spooled bytes.
func (c *capture) spill(b []byte, spooled int64) {
	c.head = make([]byte, 0, c.headMax)
	c.ring = make([]byte, c.limit-c.headMax)
	c.spilled = true
	c.total += int64(len(b))
	for _, part := range [][]byte{c.mem, b} {
		k := min(c.headMax-len(c.head), len(part))
		c.head = append(c.head, part[:k]...)
		c.pushRing(part[k:])
	}
	c.mem = nil
	c.spooled = spooled
	c.dropped = c.total - spooled
}

// appendSpilled records b in spill mode. Caller holds the job lock.
func (c *capture) appendSpilled(b []byte, spooled int64) {
	c.total += int64(len(b))
	c.pushRing(b)
	c.spooled = spooled
	c.dropped = c.total - spooled
}

func (c *capture) pushRing(b []byte) {
	size := len(c.ring)
	if size == 0 {
		return
	}
	if len(b) >= size {
		copy(c.ring, b[len(b)-size:])
		c.rpos, c.rlen = 0, size
		return
	}
	n := copy(c.ring[c.rpos:], b)
	copy(c.ring, b[n:])
	c.rpos = (c.rpos + len(b)) % size
	c.rlen = min(c.rlen+len(b), size)
}

// output renders the stream for a Snapshot. Caller holds the job lock.
// Once the stream is at EOF the text is computed once and reused.
func (c *capture) output() Output {
	o := Output{TotalBytes: c.total, Truncated: c.spilled, Dropped: c.dropped}
	if c.dropped > 0 {
		o.DropReason = c.reason
	}
	if c.textSet {
		o.Text, o.ElidedFrom, o.ElidedTo = c.text, c.elidedFrom, c.elidedTo
		return o
	}
	if !c.spilled {
		o.Text = string(c.mem)
	} else {
		o.Text, o.ElidedFrom, o.ElidedTo = c.elided()
	}
	if c.eof {
		c.text, c.textSet = o.Text, true
		c.elidedFrom, c.elidedTo = o.ElidedFrom, o.ElidedTo
	}
	return o
}

// elided returns head + marker + tail, cutting neither at a split rune,
// and the range of stream bytes the marker stands for.
func (c *capture) elided() (string, int64, int64) {
	head := c.head
	if i := lastRuneStart(head); i >= 0 && !utf8.FullRune(head[i:]) {
		head = head[:i]
	}
	tail := make([]byte, c.rlen)
	start := (c.rpos - c.rlen + len(c.ring)) % len(c.ring)
	n := copy(tail, c.ring[start:])
	copy(tail[n:], c.ring[:c.rlen-n])
	for k := 0; k < utf8.UTFMax-1 && len(tail) > 0 && !utf8.RuneStart(tail[0]); k++ {
		tail = tail[1:]
	}
	elided := c.total - int64(len(head)) - int64(len(tail))
	marker := "\n…[" + strconv.FormatInt(elided, 10) + " bytes elided]…\n"
	buf := make([]byte, 0, len(head)+len(marker)+len(tail))
	buf = append(buf, head...)
	buf = append(buf, marker...)
	buf = append(buf, tail...)
	return string(buf), int64(len(head)), c.total - int64(len(tail))
}

// lastRuneStart returns the index of the start of the last (possibly
// incomplete) rune in b, looking back at most UTFMax bytes, or -1.
func lastRuneStart(b []byte) int {
	for i := len(b) - 1; i >= 0 && i >= len(b)-utf8.UTFMax; i-- {
		if utf8.RuneStart(b[i]) {
			return i
		}
	}
	return -1
}

// readAt copies stream bytes from off into p. Caller holds the job lock; it
// returns the file and range to read after unlocking when the bytes are in
// the spool. A finished stream at its end yields io.EOF.
func (c *capture) readAt(off int64, p []byte) (n int, f *os.File, fileLen int, err error) {
	if !c.spilled {
		if off < int64(len(c.mem)) {
			return copy(p, c.mem[off:]), nil, 0, nil
		}
	} else if off < c.spooled && c.spool != nil {
		return 0, c.spool, int(min(int64(len(p)), c.spooled-off)), nil
	}
	if c.eof {
		return 0, nil, 0, io.EOF
	}
	return 0, nil, 0, nil
}

// open returns a reader of the readable bytes from off (see
// Job.OpenOutput). Caller holds the job lock, which keeps remove from
// deleting the spool while it is opened.
func (c *capture) open(off int64) (io.ReadCloser, int64, error) {
	if !c.spilled {
		if off >= int64(len(c.mem)) {
			return io.NopCloser(bytes.NewReader(nil)), 0, nil
		}
		b := bytes.Clone(c.mem[off:])
		return io.NopCloser(bytes.NewReader(b)), int64(len(b)), nil
	}
	if c.spool == nil || off >= c.spooled {
		return io.NopCloser(bytes.NewReader(nil)), 0, nil
	}
	// A descriptor of our own: the writer moves the spool's file position,
	// and sendfile reads from the position of the file it is given.
	f, err := os.Open(c.spool.Name())
	if err != nil {
		return nil, 0, err
	}
	if _, err := f.Seek(off, io.SeekStart); err != nil {
		f.Close()
		return nil, 0, err
	}
	n := c.spooled - off
	return &spoolReader{LimitedReader: io.LimitedReader{R: f, N: n}, f: f}, n, nil
}

// spoolReader reads a range of a spool file.
type spoolReader struct {
	io.LimitedReader
	f *os.File
}

// Close closes the file.
func (r *spoolReader) Close() error { return r.f.Close() }

// WriteTo hands the range to w's ReadFrom as an *io.LimitedReader of an
// *os.File, the shape net's sendfile path recognises, so a socket gets the
// bytes without a copy through user space.
func (r *spoolReader) WriteTo(w io.Writer) (int64, error) {
	if rf, ok := w.(io.ReaderFrom); ok {
		return rf.ReadFrom(&r.LimitedReader)
	}
	return io.CopyBuffer(w, &r.LimitedReader, make([]byte, 256<<10))
}

// remove closes and deletes the spool file; called when the job is dropped.
func (c *capture) remove() error {
	if c.spool == nil {
		return nil
	}
	c.spool.Close()
	if err := os.Remove(c.spool.Name()); err != nil && !os.IsNotExist(err) {
		return err
	}
	return nil
}
