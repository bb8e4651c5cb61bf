package edits

import (
	"errors"
	"fmt"
	"strings"
)

// ErrInvalidPatch is wrapped by every error Parse returns (a *ParseError).
var ErrInvalidPatch = errors.New("invalid patch")

// ParseError is a patch Parse cannot read: the 1-based line of the input it
// stopped at and what it expected there.
type ParseError struct {
	Line int
	Msg  string
}

func (e *ParseError) Error() string { return fmt.Sprintf("invalid patch: line %d: %s", e.Line, e.Msg) }

// Is makes errors.Is(err, ErrInvalidPatch) true.
func (e *ParseError) Is(target error) bool { return target == ErrInvalidPatch }

// Kind is what an Op does to its file.
type Kind int

// The kinds of Op.
const (
	Add Kind = iota + 1
	Delete
	Update
)

func (k Kind) String() string {
	switch k {
	case Add:
		return "add"
	case Delete:
		return "delete"
	case Update:
		return "update"
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// LineKind is a hunk line's prefix: ' ' context, '-' removed, '+' added.
type LineKind byte

// The kinds of hunk line.
const (
	Context LineKind = ' '
	Removed LineKind = '-'
	Added   LineKind = '+'
)

// Line is one line of a hunk, without its prefix or line ending.
type Line struct {
	Kind LineKind
	Text string
}

// Hunk is one chunk of an update: its lines in order (context and removed
// lines are what must be found in the file; context and added lines are what
// replaces them), the @@ anchors that narrow where to look, and whether the
// lines must end the file.
type Hunk struct {
	// Anchors are the texts after "@@" of the hunk's header lines, in order
	// (none for a bare "@@"). Each is a line sought after the previous one;
	// the hunk's lines are sought after the last.
	Anchors []string
	Lines   []Line
	// EOF is set by "*** End of File": the hunk's old lines end the file.
	EOF bool
	// At is the 1-based input line of the hunk's first line, for messages.
	At int
}

// Old returns the lines the hunk expects in the file: context and removed.
func (h Hunk) Old() []string { return h.side(Added) }

// New returns the lines that replace them: context and added.
func (h Hunk) New() []string { return h.side(Removed) }

func (h Hunk) side(skip LineKind) []string {
	out := make([]string, 0, len(h.Lines))
	for _, l := range h.Lines {
		if l.Kind != skip {
			out = append(out, l.Text)
		}
	}
	return out
}

// Op is one file operation of a patch.
type Op struct {
	Kind Kind
	// Path is the file, as the patch names it (trimmed of surrounding space).
	Path string
	// MoveTo is an update's new path ("*** Move to: "), or empty.
	MoveTo string
	// Content is an added file's contents: each "+" line and a "\n".
	Content string
	// Hunks are an update's chunks, in file order.
	Hunks []Hunk
	// At is the 1-based input line of the op's header, for messages.
	At int
}

const (
	beginMarker  = "*** Begin Patch"
	endMarker    = "*** End Patch"
	addMarker    = "*** Add File:"
	deleteMarker = "*** Delete File:"
	updateMarker = "*** Update File:"
	moveMarker   = "*** Move to:"
	eofMarker    = "*** End of File"
)

// Parse parses a patch in Codex's apply_patch grammar:
//
//	*** Begin Patch
//	*** Add File: <path>         then its lines, each prefixed "+"
//	*** Delete File: <path>
//	*** Update File: <path>
//	*** Move to: <path>          optional, right after Update File
//	@@ [anchor]                  starts a hunk; " " context, "-" removed, "+" added lines
//	*** End of File              optional, ends a hunk whose lines end the file
//	*** End Patch
//
// Leniency, as in Codex: blank lines around the patch are ignored, markers
// may be padded with spaces, lines may end in CRLF, the whole patch may be
// wrapped in a heredoc (a first line "<<EOF", "<<'EOF'", "<<\"EOF\"", with or
// without a leading "apply_patch ", and a last line with the delimiter), a
// hunk's empty line is an empty context line, and the first hunk of an update
// may omit its "@@". Beyond Codex: several "@@ anchor" lines in a row narrow
// the search step by step (as Codex's own instructions to models describe),
// a unified-diff header "@@ -1,3 +1,4 @@ text" counts as the anchor "text",
// blank lines between file operations are skipped, and so is a unified
// diff's "\ No newline at end of file" line in a hunk.
//
// Every error is a *ParseError naming the input line and what was expected
// there: a missing "*** Begin Patch" or "*** End Patch", a patch with no
// operation, an unknown header, an empty path, an update with no hunk, a hunk
// with no lines, or a hunk line without a ' ', '-' or '+' prefix.
func Parse(input string) ([]Op, error) {
	lines := strings.Split(input, "\n")
	for i, l := range lines {
		lines[i] = strings.TrimSuffix(l, "\r")
	}
	lo, hi := 0, len(lines)-1
	trim := func() {
		for lo <= hi && strings.TrimSpace(lines[lo]) == "" {
			lo++
		}
		for hi >= lo && strings.TrimSpace(lines[hi]) == "" {
			hi--
		}
	}
	trim()
	if lo > hi {
		return nil, &ParseError{Line: 1, Msg: "the patch is empty; expected '" + beginMarker + "'"}
	}
	if delim, ok := heredocStart(lines[lo]); ok && hi > lo && strings.TrimSpace(lines[hi]) == delim {
		lo++
		hi--
		trim()
		if lo > hi {
			return nil, &ParseError{Line: lo, Msg: "the heredoc is empty; expected '" + beginMarker + "'"}
		}
	}
	if t := strings.TrimSpace(lines[lo]); t != beginMarker {
		return nil, &ParseError{Line: lo + 1, Msg: fmt.Sprintf("expected '%s' as the first line, got %q", beginMarker, clip(t))}
	}
	if t := strings.TrimSpace(lines[hi]); hi == lo || t != endMarker {
		return nil, &ParseError{Line: hi + 1, Msg: fmt.Sprintf("expected '%s' as the last line, got %q", endMarker, clip(t))}
	}
	p := parser{lines: lines, i: lo + 1, end: hi}
	ops, err := p.ops()
	if err != nil {
		return nil, err
	}
	if len(ops) == 0 {
		return nil, &ParseError{Line: hi + 1, Msg: "the patch has no file operation; expected '*** Add File: ', '*** Delete File: ' or '*** Update File: ' before '" + endMarker + "'"}
	}
	return ops, nil
}

// heredocStart reports whether line opens a heredoc around the patch
// ("<<EOF", "<<'EOF'", "<<\"EOF\"", "<<-EOF", optionally after "apply_patch "
// or "applypatch ") and returns its delimiter.
func heredocStart(line string) (string, bool) {
	t := strings.TrimSpace(line)
	for _, cmd := range []string{"apply_patch", "applypatch"} {
		if rest, ok := strings.CutPrefix(t, cmd); ok && strings.HasPrefix(strings.TrimSpace(rest), "<<") {
			t = strings.TrimSpace(rest)
			break
		}
	}
	t, ok := strings.CutPrefix(t, "<<")
	if !ok {
		return "", false
	}
	t = strings.TrimPrefix(t, "-")
	t = strings.TrimSpace(t)
	if len(t) >= 2 && (t[0] == '\'' || t[0] == '"') && t[len(t)-1] == t[0] {
		t = t[1 : len(t)-1]
	}
	if t == "" || strings.ContainsAny(t, " \t'\"") {
		return "", false
	}
	return t, true
}

// clip shortens a line quoted in an error.
func clip(s string) string {
	const max = 120
	if len(s) <= max {
		return s
	}
	r := []rune(s)
	if len(r) <= max {
		return s
	}
	return string(r[:max]) + "…"
}

type parser struct {
	lines  []string
	i, end int // next line; index of the End Patch line
}

func (p *parser) errf(i int, format string, args ...any) error {
	return &ParseError{Line: i + 1, Msg: fmt.Sprintf(format, args...)}
}

func (p *parser) ops() ([]Op, error) {
	var ops []Op
	for p.i < p.end {
		line := p.lines[p.i]
		t := strings.TrimSpace(line)
		if t == "" {
			p.i++
			continue
		}
		at := p.i
		switch {
		case strings.HasPrefix(t, addMarker):
			path, err := p.path(t, addMarker)
			if err != nil {
				return nil, err
			}
			p.i++
			var b strings.Builder
			for p.i < p.end && strings.HasPrefix(p.lines[p.i], "+") {
				b.WriteString(p.lines[p.i][1:])
				b.WriteByte('\n')
				p.i++
			}
			ops = append(ops, Op{Kind: Add, Path: path, Content: b.String(), At: at + 1})
		case strings.HasPrefix(t, deleteMarker):
			path, err := p.path(t, deleteMarker)
			if err != nil {
				return nil, err
			}
			p.i++
			ops = append(ops, Op{Kind: Delete, Path: path, At: at + 1})
		case strings.HasPrefix(t, updateMarker):
			op, err := p.update(t)
			if err != nil {
				return nil, err
			}
			ops = append(ops, op)
		default:
			msg := "expected '*** Add File: <path>', '*** Delete File: <path>' or '*** Update File: <path>', got %q"
			if len(ops) > 0 && ops[len(ops)-1].Kind == Add && !strings.HasPrefix(t, "***") {
				msg += " (every line of an added file, an empty one too, starts with '+')"
			}
			return nil, p.errf(at, msg, clip(t))
		}
	}
	return ops, nil
}

// path returns the path after marker in the trimmed header t.
func (p *parser) path(t, marker string) (string, error) {
	path := strings.TrimSpace(strings.TrimPrefix(t, marker))
	if path == "" {
		return "", p.errf(p.i, "'%s' without a path", marker)
	}
	return path, nil
}

func (p *parser) update(t string) (Op, error) {
	path, err := p.path(t, updateMarker)
	if err != nil {
		return Op{}, err
	}
	op := Op{Kind: Update, Path: path, At: p.i + 1}
	p.i++
	if p.i < p.end {
		if mt := strings.TrimSpace(p.lines[p.i]); strings.HasPrefix(mt, moveMarker) {
			if op.MoveTo, err = p.path(mt, moveMarker); err != nil {
				return Op{}, err
			}
			p.i++
		}
	}
	for p.i < p.end {
		line := p.lines[p.i]
		t := strings.TrimSpace(line)
		if t == "" && len(op.Hunks) == 0 {
			p.i++ // blank lines before the first hunk
			continue
		}
		if t == eofMarker {
			return Op{}, p.errf(p.i, "'%s' must follow a hunk's lines", eofMarker)
		}
		if strings.HasPrefix(line, "*") {
			break // the next file operation
		}
		h, err := p.hunk(len(op.Hunks) == 0)
		if err != nil {
			return Op{}, err
		}
		op.Hunks = append(op.Hunks, h)
	}
	if len(op.Hunks) == 0 {
		return Op{}, p.errf(op.At-1, "update of %q has no hunk; expected '@@' and lines starting with ' ', '-' or '+'", path)
	}
	return op, nil
}

// hunk parses one hunk at p.i: its "@@" lines, then its lines up to the next
// "@@", a line starting with '*', or the end. first allows the missing "@@"
// Codex allows for an update's first hunk.
func (p *parser) hunk(first bool) (Hunk, error) {
	h := Hunk{At: p.i + 1}
	headers := 0
	for p.i < p.end {
		t := strings.TrimSpace(p.lines[p.i])
		if !strings.HasPrefix(t, "@@") {
			break
		}
		if a := anchor(t); a != "" {
			h.Anchors = append(h.Anchors, a)
		}
		headers++
		p.i++
	}
	if headers == 0 && !first {
		line := p.lines[p.i]
		if k := LineKind(line[0]); k == Context || k == Removed || k == Added {
			return h, p.errf(p.i, "expected '@@' to start a new hunk after '%s', got %q", eofMarker, clip(line))
		}
		return h, p.errf(p.i, "%q: a hunk line starts with ' ' (context), '-' (removed) or '+' (added), and a new hunk with '@@'", clip(line))
	}
	for p.i < p.end {
		line := p.lines[p.i]
		if line != "" {
			switch k := LineKind(line[0]); k {
			case Context, Removed, Added:
				h.Lines = append(h.Lines, Line{Kind: k, Text: line[1:]})
				p.i++
				continue
			}
		}
		if strings.HasPrefix(line, `\ No newline at end of file`) {
			p.i++ // a unified diff's marker, meaningless here
			continue
		}
		if strings.TrimSpace(line) == "" {
			// An empty line (or one of spaces without a prefix) is an
			// empty context line, as in Codex.
			h.Lines = append(h.Lines, Line{Kind: Context})
			p.i++
			continue
		}
		if strings.TrimSpace(line) == eofMarker {
			if len(h.Lines) == 0 {
				return h, p.errf(p.i, "'%s' must follow a hunk's lines", eofMarker)
			}
			h.EOF = true
			p.i++
		}
		break
	}
	if len(h.Lines) == 0 {
		if p.i < p.end && !strings.HasPrefix(p.lines[p.i], "*") && !strings.HasPrefix(strings.TrimSpace(p.lines[p.i]), "@@") {
			return h, p.errf(p.i, "%q: a hunk line starts with ' ' (context), '-' (removed) or '+' (added)", clip(p.lines[p.i]))
		}
		return h, p.errf(h.At-1, "the hunk has no lines; expected lines starting with ' ', '-' or '+' after '@@'")
	}
	return h, nil
}

// anchor returns the context text of a trimmed "@@" header line: what
// follows "@@", or what follows a unified-diff range "@@ -a,b +c,d @@".
func anchor(t string) string {
	rest := strings.TrimSpace(t[2:])
	if strings.HasPrefix(rest, "-") {
		if i := strings.Index(rest, "@@"); i >= 0 && isRange(strings.TrimSpace(rest[:i])) {
			return strings.TrimSpace(rest[i+2:])
		}
	}
	return rest
}

// isRange reports whether s is a unified-diff range pair "-a[,b] +c[,d]".
func isRange(s string) bool {
	f := strings.Fields(s)
	if len(f) != 2 || f[0][0] != '-' || f[1][0] != '+' {
		return false
	}
	for _, r := range f {
		for i, c := range r[1:] {
			if (c < '0' || c > '9') && (c != ',' || i == 0) {
				return false
			}
		}
		if len(r) < 2 {
			return false
		}
	}
	return true
}
