package edits

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"unicode"
)

// Errors of Plan, besides fs.ErrExist and fs.ErrNotExist.
var (
	// ErrNoMatch: a hunk's anchor or lines are not in the file it updates.
	ErrNoMatch = errors.New("patch context not found")
	// ErrTooComplex: applying the patch would take more than MaxWork steps.
	ErrTooComplex = errors.New("patch too costly to apply")
	// ErrConflict: the patch leaves a file where it leaves another file
	// beneath it, as if it were a directory.
	ErrConflict = errors.New("conflicting paths")
)

// MaxWork bounds the work of one Plan, counted in steps: a line split,
// normalised, compared or written, and each 64 bytes of them. A patch is
// hostile input: without a bound, thousands of hunks that each match only
// after the strict passes have scanned the rest of a large file cost
// lines × hunks. BenchmarkPlanUpdate's patch (10 hunks on a 2,000-line file)
// takes about 7,000 steps; the bound is reached in about a second of one
// core (BenchmarkPlanOverBudget).
const MaxWork = 50_000_000

// work is what is left of a Plan's MaxWork.
type work struct{ left int }

// spend takes n steps and reports whether the budget still holds.
func (w *work) spend(n int) bool {
	w.left -= n
	return w.left >= 0
}

var errTooComplex = fmt.Errorf("%w: it needs too much searching (many hunks on a large file); split it into smaller patches", ErrTooComplex)

// Change is one file's outcome of a plan: its new contents, or its removal.
type Change struct {
	// Path is the file to write (or remove when Delete), cleaned.
	Path string
	// Delete: remove Path. Content is nil.
	Delete bool
	// Content is the file's new contents (never nil when !Delete).
	Content []byte
	// From is set when the contents were moved here from another path of the
	// plan's input ("*** Move to: "): the old path, to be removed once Path is
	// written. No other Change names it.
	From string
}

// file is Plan's view of one path while it applies the ops in order.
type file struct {
	exists  bool
	orig    bool // existed before the plan
	content []byte
	// from is the path whose original file this is (the path itself until a
	// move carries it elsewhere); empty for contents the patch made.
	from string
}

// Plan computes every file's new content from ops without writing anything.
// read gives a file's current bytes, and an error wrapping fs.ErrNotExist
// when it is absent; any other error from read fails the plan. Each path is
// read at most once.
//
// The ops apply in order to a view of the files, as Codex applies them one
// after the other, so a patch may add a file and then update it, or delete
// one and add it again. Any op that cannot apply fails the whole plan and
// nothing is to be written (Codex keeps the ops before the failing one; dshd
// applies all or nothing):
//
//   - add of a path that exists: fs.ErrExist (Codex overwrites; a model that
//     means to replace a file deletes it first, or uses write_file);
//   - delete or update of a path that does not exist: fs.ErrNotExist;
//   - a move onto a path that exists: fs.ErrExist (Codex overwrites);
//   - a hunk whose anchor or lines are not found: ErrNoMatch;
//   - a file left where another is written beneath it: ErrConflict;
//   - more work than MaxWork: ErrTooComplex.
//
// Paths are compared after filepath.Clean; Plan does not judge them (the
// caller's scope does). Updates follow Codex: each hunk's @@ anchors are
// found one after the other, then its old lines (context and removed) at or
// after the last anchor, or after the previous hunk, trying an exact match,
// then one ignoring trailing whitespace, then one ignoring surrounding
// whitespace, then one with typographic dashes, quotes and spaces read as
// ASCII and a byte-order mark ignored; the first match wins. "*** End of
// File" requires the lines to end the file. A hunk with no old lines
// inserts its lines right after its last anchor, or at the end of the file
// when it has none (Codex appends even when anchored). When old lines are not found and end in empty lines, the
// search is tried again without them (a patch's trailing blank lines).
//
// Line endings: every line of an updated file keeps its own ending (LF or
// CRLF); new lines take the ending of the file's first line; context lines
// keep the file's text, so a fuzzy match never rewrites them; and the file
// ends with a line ending, as Codex's updates always do. Added files are
// written as the patch gives them, with LF.
//
// The changes come out one per path, in the order the patch first names
// the paths (so "delete a" before "add a/b" removes a first); a path added
// and deleted again yields none.
func Plan(ops []Op, read func(path string) ([]byte, error)) ([]Change, error) {
	return plan(ops, read, MaxWork)
}

// plan is Plan with a budget of steps.
func plan(ops []Op, read func(path string) ([]byte, error), budget int) ([]Change, error) {
	v := &view{read: read, files: map[string]*file{}, w: &work{left: budget}}
	for _, op := range ops {
		if err := v.apply(op); err != nil {
			return nil, err
		}
	}
	if err := v.conflicts(); err != nil {
		return nil, err
	}
	return v.changes(), nil
}

// view is plan's view of the files while it applies the ops in order.
type view struct {
	read  func(path string) ([]byte, error)
	files map[string]*file
	order []string // the paths in the order the patch first names them
	w     *work
}

// get returns path p's file, reading it the first time p is named.
func (v *view) get(p string) (*file, error) {
	if f, ok := v.files[p]; ok {
		return f, nil
	}
	b, err := v.read(p)
	f := &file{}
	switch {
	case err == nil:
		f.exists, f.orig, f.content, f.from = true, true, b, p
	case errors.Is(err, fs.ErrNotExist):
	default:
		return nil, fmt.Errorf("read %s: %w", p, err)
	}
	v.files[p] = f
	v.order = append(v.order, p)
	return f, nil
}

// apply applies one op to the view.
func (v *view) apply(op Op) error {
	if op.Path == "" {
		return fmt.Errorf("%s at patch line %d: empty path", op.Kind, op.At)
	}
	p := filepath.Clean(op.Path)
	f, err := v.get(p)
	if err != nil {
		return err
	}
	switch op.Kind {
	case Add:
		if f.exists {
			return fmt.Errorf("add %s (patch line %d): %w: the file already exists; update it, or delete it first", p, op.At, fs.ErrExist)
		}
		f.exists, f.content, f.from = true, []byte(op.Content), ""
	case Delete:
		if !f.exists {
			return fmt.Errorf("delete %s (patch line %d): %w", p, op.At, fs.ErrNotExist)
		}
		f.exists, f.content, f.from = false, nil, ""
	case Update:
		return v.update(p, f, op)
	default:
		return fmt.Errorf("op at patch line %d: unknown kind %v", op.At, op.Kind)
	}
	return nil
}

// update applies an update op to f, the file at p, and its move if it has
// one.
func (v *view) update(p string, f *file, op Op) error {
	if !f.exists {
		return fmt.Errorf("update %s (patch line %d): %w", p, op.At, fs.ErrNotExist)
	}
	content, err := applyHunks(f.content, op.Hunks, v.w)
	if err != nil {
		return fmt.Errorf("update %s: %w", p, err)
	}
	dest := p
	if op.MoveTo != "" {
		dest = filepath.Clean(op.MoveTo)
	}
	if dest == p {
		f.content = content
		return nil
	}
	d, err := v.get(dest)
	if err != nil {
		return err
	}
	if d.exists {
		return fmt.Errorf("move %s to %s (patch line %d): %w: %s already exists", p, dest, op.At, fs.ErrExist, dest)
	}
	d.exists, d.content, d.from = true, content, f.from
	f.exists, f.content, f.from = false, nil, ""
	return nil
}

// conflicts fails when a file is also a directory of another: writing would
// fail halfway. Paths are clean, so a parent is a prefix ending before a
// separator; only prefixes as long as some path left a file can be one.
func (v *view) conflicts() error {
	lengths := map[int]bool{}
	for _, p := range v.order {
		if v.files[p].exists {
			lengths[len(p)] = true
		}
	}
	for _, p := range v.order {
		if !v.files[p].exists {
			continue
		}
		if !v.w.spend(1 + len(p)>>6) {
			return errTooComplex
		}
		for i := len(p) - 1; i > 0; i-- {
			if !os.IsPathSeparator(p[i]) || !lengths[i] {
				continue
			}
			if !v.w.spend(1 + i>>6) {
				return errTooComplex
			}
			if f, ok := v.files[p[:i]]; ok && f.exists {
				return fmt.Errorf("%w: the patch leaves %s a file and writes %s beneath it", ErrConflict, p[:i], p)
			}
		}
	}
	return nil
}

// changes are the view's outcome, one per path in order. A moved file's old
// path is removed by its move (Change.From) when nothing else ends up there.
func (v *view) changes() []Change {
	claimed := map[string]bool{}
	for _, p := range v.order {
		f := v.files[p]
		if o := v.files[f.from]; f.exists && f.from != "" && f.from != p && o != nil && o.orig && !o.exists && !claimed[f.from] {
			claimed[f.from] = true
		} else {
			f.from = ""
		}
	}
	changes := make([]Change, 0, len(v.order))
	for _, p := range v.order {
		f := v.files[p]
		switch {
		case f.exists:
			c := f.content
			if c == nil {
				c = []byte{}
			}
			changes = append(changes, Change{Path: p, Content: c, From: f.from})
		case f.orig && !claimed[p]:
			changes = append(changes, Change{Path: p, Delete: true})
		}
	}
	return changes
}

// srcLines are a file's lines being updated: each line's text, and its
// ending ("\n", "\r\n", or "" for a last line without one).
type srcLines struct {
	text []string
	end  []string
}

func splitLines(content []byte) srcLines {
	s := string(content)
	n := strings.Count(s, "\n") + 1
	src := srcLines{text: make([]string, 0, n), end: make([]string, 0, n)}
	for s != "" {
		i := strings.IndexByte(s, '\n')
		if i < 0 {
			src.text, src.end = append(src.text, s), append(src.end, "")
			break
		}
		text, end := s[:i], "\n"
		if strings.HasSuffix(text, "\r") {
			text, end = text[:i-1], "\r\n"
		}
		src.text, src.end = append(src.text, text), append(src.end, end)
		s = s[i+1:]
	}
	return src
}

type replacement struct {
	start, n int // lines of the file replaced
	lines    []Line
}

// applyHunks applies an update's hunks to content; see Plan.
func applyHunks(content []byte, hunks []Hunk, w *work) ([]byte, error) {
	if !w.spend(len(content)/64 + len(hunks)) {
		return nil, errTooComplex
	}
	src := splitLines(content)
	eol := "\n"
	if len(src.end) > 0 && src.end[0] != "" {
		eol = src.end[0]
	}
	m := &matcher{text: src.text, size: len(content), work: w}
	var reps []replacement
	at := 0
	for _, h := range hunks {
		r, next, err := locate(m, h, at)
		if err != nil {
			return nil, err
		}
		reps = append(reps, r)
		at = next
	}
	sort.SliceStable(reps, func(i, j int) bool { return reps[i].start < reps[j].start })

	if !w.spend(len(src.text) + len(content)>>6) {
		return nil, errTooComplex
	}
	return render(src, reps, eol, len(content)+64*len(hunks))
}

// locate finds where hunk h applies in m's file, searching from line at: its
// anchors one after the other, then its old lines. It returns the hunk's
// replacement and the line the next hunk's search starts from.
func locate(m *matcher, h Hunk, at int) (replacement, int, error) {
	for _, a := range h.Anchors {
		i, ok := m.seek([]string{a}, at, false)
		if m.over {
			return replacement{}, 0, errTooComplex
		}
		if !ok {
			return replacement{}, 0, fmt.Errorf("%w: hunk at patch line %d: the line '@@ %s' was not found%s", ErrNoMatch, h.At, a, afterLine(at))
		}
		at = i + 1
	}
	lines := h.Lines
	old := Hunk{Lines: lines}.Old()
	if len(old) == 0 {
		pos := at
		if len(h.Anchors) == 0 {
			pos = len(m.text)
			// Codex: before a final empty line, when the file has one.
			if pos > 0 && m.text[pos-1] == "" {
				pos--
			}
		}
		return replacement{start: pos, lines: lines}, at, nil
	}
	start, ok := m.seek(old, at, h.EOF)
	if !ok {
		// Codex: a trailing empty line stands for the file's final
		// newline; try without the trailing empty lines.
		trimmed := trimTrailingEmpty(lines)
		if o := (Hunk{Lines: trimmed}).Old(); len(trimmed) < len(lines) && len(o) > 0 {
			if start, ok = m.seek(o, at, h.EOF); ok {
				lines, old = trimmed, o
			}
		}
	}
	if m.over {
		return replacement{}, 0, errTooComplex
	}
	if !ok {
		where := afterLine(at)
		if h.EOF {
			where = " at the end of the file"
		}
		return replacement{}, 0, fmt.Errorf("%w: hunk at patch line %d: these lines were not found%s:\n%s", ErrNoMatch, h.At, where, quoteLines(old))
	}
	return replacement{start: start, n: len(old), lines: lines}, start + len(old), nil
}

// trimTrailingEmpty returns lines without their trailing empty lines that
// are not added ones.
func trimTrailingEmpty(lines []Line) []Line {
	for len(lines) > 0 {
		l := lines[len(lines)-1]
		if l.Text != "" || l.Kind == Added {
			break
		}
		lines = lines[:len(lines)-1]
	}
	return lines
}

// render writes the updated file, of capacity size: src's lines outside the
// replacements as they were, and each replacement's lines in place of the
// lines it replaces. reps are sorted by start; new lines end with eol.
func render(src srcLines, reps []replacement, eol string, size int) ([]byte, error) {
	out := make([]byte, 0, size)
	write := func(text, end string) {
		if end == "" {
			end = eol
		}
		out = append(out, text...)
		out = append(out, end...)
	}
	pos := 0
	for _, r := range reps {
		if r.start < pos && r.n == 0 {
			r.start = pos // an insertion at the end, after a hunk that took the final empty line
		}
		if r.start < pos {
			return nil, fmt.Errorf("%w: two hunks overlap at line %d of the file", ErrNoMatch, r.start+1)
		}
		for ; pos < r.start; pos++ {
			write(src.text[pos], src.end[pos])
		}
		for _, l := range r.lines {
			switch l.Kind {
			case Added:
				write(l.Text, eol)
			case Removed:
				pos++
			default: // context keeps the file's own line
				write(src.text[pos], src.end[pos])
				pos++
			}
		}
	}
	for ; pos < len(src.text); pos++ {
		write(src.text[pos], src.end[pos])
	}
	return out, nil
}

func afterLine(at int) string {
	if at == 0 {
		return ""
	}
	return fmt.Sprintf(" after line %d of the file", at)
}

// quoteLines renders lines for an error, at most 20 of them.
func quoteLines(lines []string) string {
	const max = 20
	var b strings.Builder
	for i, l := range lines {
		if i == max {
			fmt.Fprintf(&b, "  … %d more lines\n", len(lines)-max)
			break
		}
		b.WriteString("  ")
		b.WriteString(clip(l))
		b.WriteByte('\n')
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// matcher finds runs of lines in a file with Codex's decreasing strictness.
// Each pass compares lines after a normalisation; a file's normalised lines
// are computed once per pass, and the search is Knuth–Morris–Pratt over
// lines, so a hostile patch costs linear time, not lines × pattern.
type matcher struct {
	text []string
	size int // bytes of text
	keys [len(passes)][]string
	work *work
	over bool // the work ran out: every seek fails
}

var passes = [...]func(string) string{
	func(s string) string { return s },
	func(s string) string { return strings.TrimRightFunc(s, unicode.IsSpace) },
	strings.TrimSpace,
	normalise,
}

func (m *matcher) key(pass int) []string {
	if pass == 0 {
		return m.text
	}
	if m.keys[pass] == nil {
		if !m.work.spend(len(m.text) + m.size>>6) {
			m.over = true
			return nil
		}
		k := make([]string, len(m.text))
		for i, l := range m.text {
			k[i] = passes[pass](l)
		}
		m.keys[pass] = k
	}
	return m.keys[pass]
}

// seek returns the first index at or after start where pattern occurs, trying
// each pass in turn. With eof the pattern must end the file.
func (m *matcher) seek(pattern []string, start int, eof bool) (int, bool) {
	n, k := len(m.text), len(pattern)
	if k == 0 || k > n-start || start < 0 {
		return 0, false
	}
	pat := make([]string, k)
	for pass, norm := range passes {
		if m.over {
			return 0, false
		}
		for i, p := range pattern {
			pat[i] = norm(p)
		}
		keys := m.key(pass)
		if m.over {
			return 0, false
		}
		if eof {
			if !m.work.spend(k + m.size>>6) {
				m.over = true
				return 0, false
			}
			if equalAt(keys, pat, n-k) {
				return n - k, true
			}
			continue
		}
		i, steps := kmp(keys, pat, start)
		if !m.work.spend(steps) {
			m.over = true
			return 0, false
		}
		if i >= 0 {
			return i, true
		}
	}
	return 0, false
}

func equalAt(keys, pat []string, at int) bool {
	for i, p := range pat {
		if keys[at+i] != p {
			return false
		}
	}
	return true
}

// kmp returns the first index ≥ start where pat occurs in keys, or -1, and
// the steps it took: one per comparison of lines (at most two per line of
// each), and one more per 64 bytes of two lines of equal length, which
// strings compare byte by byte.
func kmp(keys, pat []string, start int) (int, int) {
	steps := 0
	eq := func(a, b string) bool {
		steps++
		if len(a) != len(b) {
			return false
		}
		steps += len(a) >> 6
		return a == b
	}
	fail := make([]int, len(pat))
	for i, j := 1, 0; i < len(pat); i++ {
		for j > 0 && !eq(pat[i], pat[j]) {
			j = fail[j-1]
		}
		if eq(pat[i], pat[j]) {
			j++
		}
		fail[i] = j
	}
	for i, j := start, 0; i < len(keys); i++ {
		for j > 0 && !eq(keys[i], pat[j]) {
			j = fail[j-1]
		}
		if eq(keys[i], pat[j]) {
			j++
		}
		if j == len(pat) {
			return i - len(pat) + 1, steps
		}
	}
	return -1, steps
}

// normalise is Codex's most lenient comparison: trimmed, with typographic
// dashes, quotes and spaces read as their ASCII forms; and, beyond Codex,
// without a byte-order mark (a file's first line may begin with one).
func normalise(s string) string {
	return strings.TrimSpace(strings.Map(func(r rune) rune {
		switch r {
		case '\ufeff':
			return -1
		case '\u2010', '\u2011', '\u2012', '\u2013', '\u2014', '\u2015', '\u2212':
			return '-'
		case '\u2018', '\u2019', '\u201a', '\u201b':
			return '\''
		case '\u201c', '\u201d', '\u201e', '\u201f':
			return '"'
		case '\u00a0', '\u2002', '\u2003', '\u2004', '\u2005', '\u2006', '\u2007', '\u2008', '\u2009', '\u200a', '\u202f', '\u205f', '\u3000':
			return ' '
		}
		return r
	}, s))
}
