package edits

import (
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// replaceCases come from Claude Code's Edit tool description (old_string must
// be unique unless replace_all; the edit fails when it is missing or not
// unique; old_string must differ from new_string) and from the line-ending
// choices documented on Replace.
var replaceCases = []struct {
	name          string
	content       string
	old, new      string
	all           bool
	want          string
	wantN         int
	wantErr       error
	wantErrSubstr string
}{
	{name: "unique", content: "a\nb\nc\n", old: "b", new: "B", want: "a\nB\nc\n", wantN: 1},
	{name: "multi-line old", content: "func f() {\n\treturn 1\n}\n", old: "\treturn 1\n}", new: "\treturn 2\n}", want: "func f() {\n\treturn 2\n}\n", wantN: 1},
	{name: "not found", content: "a\nb\n", old: "x", new: "y", wantErr: ErrNotFound},
	{name: "indentation must match", content: "\tx := 1\n", old: "    x := 1", new: "x := 2", wantErr: ErrNotFound},
	{name: "not unique", content: "x\nx\nx\n", old: "x", new: "y", wantErr: ErrNotUnique, wantN: 3, wantErrSubstr: "3 matches"},
	{name: "replace_all", content: "x\nx\nx\n", old: "x", new: "y", all: true, want: "y\ny\ny\n", wantN: 3},
	{name: "replace_all of a unique string", content: "a x b", old: "x", new: "y", all: true, want: "a y b", wantN: 1},
	{name: "replace_all not found", content: "abc", old: "x", new: "y", all: true, wantErr: ErrNotFound},
	{name: "no change", content: "a", old: "a", new: "a", wantErr: ErrNoChange},
	{name: "occurrences do not overlap", content: "aaa", old: "aa", new: "b", want: "ba", wantN: 1},
	{name: "delete by empty new", content: "a\nb\nc\n", old: "b\n", new: "", want: "a\nc\n", wantN: 1},
	{name: "trailing newline kept", content: "a\nb\n", old: "b", new: "c", want: "a\nc\n", wantN: 1},
	{name: "no trailing newline stays absent", content: "a\nb", old: "b", new: "c", want: "a\nc", wantN: 1},
	{name: "trailing newline removed only when old has it", content: "a\nb\n", old: "b\n", new: "c", want: "a\nc", wantN: 1},
	{name: "empty old fills an empty file", content: "", old: "", new: "hello\n", want: "hello\n", wantN: 1},
	{name: "empty old on a file", content: "x", old: "", new: "y", wantErr: ErrEmptyOld},
	{name: "CRLF file, LF old and new", content: "one\r\ntwo\r\nthree\r\n", old: "one\ntwo", new: "uno\ndos", want: "uno\r\ndos\r\nthree\r\n", wantN: 1},
	{name: "CRLF file, CRLF old", content: "one\r\ntwo\r\n", old: "one\r\ntwo", new: "1\r\n2", want: "1\r\n2\r\n", wantN: 1},
	{name: "CRLF file, single-line old, new adds lines", content: "a\r\nb\r\n", old: "a", new: "a\nx", want: "a\r\nx\r\nb\r\n", wantN: 1},
	{name: "CRLF file, LF is no change in CRLF", content: "a\r\nb\r\n", old: "a\r\nb", new: "a\nb", wantErr: ErrNoChange},
	{name: "LF file keeps LF", content: "a\nb\n", old: "a", new: "x\r\ny", want: "x\ny\nb\n", wantN: 1},
	{name: "LF file, CRLF old and new", content: "a\nb\nc\n", old: "a\r\nb", new: "1\r\n2", want: "1\n2\nc\n", wantN: 1},
	{name: "LF file with a stray CRLF: old as given, new in LF", content: "a\nb\r\nc\n", old: "b\r\nc", new: "B\r\nC", want: "a\nB\nC\n", wantN: 1},
	{name: "file without a line ending: new as given", content: "abc", old: "b", new: "1\r\n2", want: "a1\r\n2c", wantN: 1},
	{name: "file starting with a newline", content: "\nx\ny\n", old: "x\ny", new: "1\r\n2", want: "\n1\n2\n", wantN: 1},
	{name: "unicode", content: "naïve café\n", old: "café", new: "tea", want: "naïve tea\n", wantN: 1},
}

func TestReplace(t *testing.T) {
	for _, tc := range replaceCases {
		t.Run(tc.name, func(t *testing.T) {
			got, n, err := Replace(tc.content, tc.old, tc.new, tc.all)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("err = %v, want %v", err, tc.wantErr)
				}
				if !strings.Contains(err.Error(), tc.wantErrSubstr) {
					t.Errorf("err = %q, want it to contain %q", err, tc.wantErrSubstr)
				}
				if n != tc.wantN {
					t.Errorf("n = %d, want %d", n, tc.wantN)
				}
				return
			}
			if err != nil {
				t.Fatalf("err = %v", err)
			}
			if got != tc.want || n != tc.wantN {
				t.Errorf("Replace = %q, %d; want %q, %d", got, n, tc.want, tc.wantN)
			}
		})
	}
}

// readMap reads from files, counting reads per path.
func readMap(files map[string]string, reads map[string]int) func(string) ([]byte, error) {
	return func(p string) ([]byte, error) {
		if reads != nil {
			reads[p]++
		}
		s, ok := files[p]
		if !ok {
			return nil, &fs.PathError{Op: "open", Path: p, Err: fs.ErrNotExist}
		}
		return []byte(s), nil
	}
}

// applyChanges returns files after changes, as a caller would write them.
func applyChanges(t testing.TB, files map[string]string, changes []Change) map[string]string {
	t.Helper()
	out := map[string]string{}
	for k, v := range files {
		out[k] = v
	}
	seen := map[string]bool{}
	for _, c := range changes {
		for _, p := range []string{c.Path, c.From} {
			if p == "" {
				continue
			}
			if seen[p] {
				t.Fatalf("path %s named by two changes: %+v", p, changes)
			}
			seen[p] = true
		}
		switch {
		case c.Delete:
			if _, ok := out[c.Path]; !ok {
				t.Fatalf("delete of absent %s", c.Path)
			}
			delete(out, c.Path)
		default:
			if c.Content == nil {
				t.Fatalf("change %s without content", c.Path)
			}
			out[c.Path] = string(c.Content)
			if c.From != "" {
				if _, ok := out[c.From]; !ok {
					t.Fatalf("move from absent %s", c.From)
				}
				delete(out, c.From)
			}
		}
	}
	return out
}

func patch(body ...string) string {
	return "*** Begin Patch\n" + strings.Join(body, "\n") + "\n*** End Patch\n"
}

// planCases come from Codex's apply-patch tests and fixtures (add, delete,
// update, move, multiple chunks, End of File, pure addition, unicode
// punctuation, whitespace-padded markers, rejected empty and missing
// context) and from the choices documented on Plan.
var planCases = []struct {
	name    string
	files   map[string]string
	patch   string
	want    map[string]string
	wantErr error
	errHas  string
}{
	{
		name:  "add file",
		patch: patch("*** Add File: nested/new.txt", "+ab", "+cd"),
		want:  map[string]string{"nested/new.txt": "ab\ncd\n"},
	},
	{
		name:  "add empty file",
		patch: patch("*** Add File: empty"),
		want:  map[string]string{"empty": ""},
	},
	{
		name:    "add of an existing file",
		files:   map[string]string{"dup.txt": "old\n"},
		patch:   patch("*** Add File: dup.txt", "+new"),
		wantErr: fs.ErrExist, errHas: "add dup.txt",
	},
	{
		name:  "delete",
		files: map[string]string{"obsolete.txt": "x", "keep.txt": "k\n"},
		patch: patch("*** Delete File: obsolete.txt"),
		want:  map[string]string{"keep.txt": "k\n"},
	},
	{
		name:    "delete of a missing file",
		files:   map[string]string{"foo.txt": "x"},
		patch:   patch("*** Delete File: missing.txt"),
		wantErr: fs.ErrNotExist, errHas: "delete missing.txt",
	},
	{
		name:    "update of a missing file",
		patch:   patch("*** Update File: missing.txt", "@@", "-a", "+b"),
		wantErr: fs.ErrNotExist, errHas: "update missing.txt",
	},
	{
		name:  "update",
		files: map[string]string{"update.txt": "foo\nbar\n"},
		patch: patch("*** Update File: update.txt", "@@", " foo", "-bar", "+baz"),
		want:  map[string]string{"update.txt": "foo\nbaz\n"},
	},
	{
		name:  "update without @@ on the first hunk",
		files: map[string]string{"f.py": "import foo\nx = 1\n"},
		patch: patch("*** Update File: f.py", " import foo", "+import bar"),
		want:  map[string]string{"f.py": "import foo\nimport bar\nx = 1\n"},
	},
	{
		name:  "blank lines before the first hunk",
		files: map[string]string{"f": "a\n"},
		patch: patch("*** Update File: f", "", "  ", "@@", "-a", "+b"),
		want:  map[string]string{"f": "b\n"},
	},
	{
		name:  "multiple hunks",
		files: map[string]string{"multi.txt": "foo\nbar\nbaz\nqux\n"},
		patch: patch("*** Update File: multi.txt", "@@", " foo", "-bar", "+BAR", "@@", " baz", "-qux", "+QUX"),
		want:  map[string]string{"multi.txt": "foo\nBAR\nbaz\nQUX\n"},
	},
	{
		name:  "interleaved hunks with End of File",
		files: map[string]string{"i.txt": "a\nb\nc\nd\ne\nf\n"},
		patch: patch("*** Update File: i.txt", "@@", " a", "-b", "+B", "@@", " c", " d", "-e", "+E", "@@", " f", "+g", "*** End of File"),
		want:  map[string]string{"i.txt": "a\nB\nc\nd\nE\nf\ng\n"},
	},
	{
		name:  "End of File picks the last occurrence",
		files: map[string]string{"t.txt": "x\nend\nx\nend\n"},
		patch: patch("*** Update File: t.txt", "@@", " x", "-end", "+END", "*** End of File"),
		want:  map[string]string{"t.txt": "x\nend\nx\nEND\n"},
	},
	{
		name:  "End of File with two lines",
		files: map[string]string{"t.txt": "a\nb\nc\n"},
		patch: patch("*** Update File: t.txt", "@@", " b", "-c", "+C", "*** End of File"),
		want:  map[string]string{"t.txt": "a\nb\nC\n"},
	},
	{
		name:    "End of File when the lines are not at the end",
		files:   map[string]string{"t.txt": "first\nsecond\nthird\n"},
		patch:   patch("*** Update File: t.txt", "@@", " first", "-second", "+2", "*** End of File"),
		wantErr: ErrNoMatch, errHas: "at the end of the file",
	},
	{
		name:  "@@ anchor chooses among repeats",
		files: map[string]string{"a.py": "def foo():\n    return 1\n\ndef bar():\n    return 1\n"},
		patch: patch("*** Update File: a.py", "@@ def bar():", "-    return 1", "+    return 2"),
		want:  map[string]string{"a.py": "def foo():\n    return 1\n\ndef bar():\n    return 2\n"},
	},
	{
		name:  "two @@ anchors narrow step by step",
		files: map[string]string{"a.py": "class A:\n    def m(self):\n        pass\nclass B:\n    def m(self):\n        pass\n"},
		patch: patch("*** Update File: a.py", "@@ class B:", "@@     def m(self):", "-        pass", "+        return 1"),
		want:  map[string]string{"a.py": "class A:\n    def m(self):\n        pass\nclass B:\n    def m(self):\n        return 1\n"},
	},
	{
		name:  "unified-diff range header",
		files: map[string]string{"a.txt": "one\ntwo\n"},
		patch: patch("*** Update File: a.txt", "@@ -1,2 +1,2 @@", " one", "-two", "+2"),
		want:  map[string]string{"a.txt": "one\n2\n"},
	},
	{
		name:    "anchor not found",
		files:   map[string]string{"a.py": "def foo():\n    pass\n"},
		patch:   patch("*** Update File: a.py", "@@ def nope():", "-    pass", "+    return"),
		wantErr: ErrNoMatch, errHas: "'@@ def nope():' was not found",
	},
	{
		name:    "context mismatch",
		files:   map[string]string{"m.txt": "line1\nline2\n"},
		patch:   patch("*** Update File: m.txt", "@@", "-missing", "+changed"),
		wantErr: ErrNoMatch, errHas: "these lines were not found",
	},
	{
		name:    "context mismatch after an earlier hunk",
		files:   map[string]string{"m.txt": "a\nb\nc\n"},
		patch:   patch("*** Update File: m.txt", "@@", " a", "-b", "+B", "@@", "-a", "+A"),
		wantErr: ErrNoMatch, errHas: "not found after line 2 of the file:\n  a",
	},
	{
		name:    "a long mismatch is shown in part",
		files:   map[string]string{"m.txt": "a\n"},
		patch:   patch("*** Update File: m.txt", "@@", strings.Repeat("-x\n", 24)+"-y"),
		wantErr: ErrNoMatch, errHas: "  x\n  … 5 more lines",
	},
	{
		name:    "context mismatch leaves earlier ops unwritten",
		files:   map[string]string{"m.txt": "line1\n"},
		patch:   patch("*** Add File: created.txt", "+hello", "*** Update File: m.txt", "@@", "-missing", "+x"),
		wantErr: ErrNoMatch,
	},
	{
		name:  "pure addition appends at the end",
		files: map[string]string{"input.txt": "line1\nline2\n"},
		patch: patch("*** Update File: input.txt", "@@", "+added line 1", "+added line 2"),
		want:  map[string]string{"input.txt": "line1\nline2\nadded line 1\nadded line 2\n"},
	},
	{
		name:  "anchored pure addition inserts after the anchor",
		files: map[string]string{"a.py": "def f():\n    return 1\n\nx = 2\n"},
		patch: patch("*** Update File: a.py", "@@ def f():", "+    \"\"\"Doc.\"\"\""),
		want:  map[string]string{"a.py": "def f():\n    \"\"\"Doc.\"\"\"\n    return 1\n\nx = 2\n"},
	},
	{
		name:  "pure addition goes before a final empty line",
		files: map[string]string{"f": "a\n\n"},
		patch: patch("*** Update File: f", "@@", "+b"),
		want:  map[string]string{"f": "a\nb\n\n"},
	},
	{
		name:  "anchored insertion, then a hunk right after it",
		files: map[string]string{"a.py": "def f():\n    return 1\n"},
		patch: patch("*** Update File: a.py", "@@ def f():", "+    # doc", "@@", "-    return 1", "+    return 2"),
		want:  map[string]string{"a.py": "def f():\n    # doc\n    return 2\n"},
	},
	{
		name:  "end insertion after a hunk that took the final empty line",
		files: map[string]string{"f": "a\n\n"},
		patch: patch("*** Update File: f", "@@", "+x", "@@", " a", " ", "+y"),
		want:  map[string]string{"f": "a\n\ny\nx\n"},
	},
	{
		name:    "hunk of only empty lines not found",
		files:   map[string]string{"f": "a\nb\n"},
		patch:   patch("*** Update File: f", "@@", "-", " "),
		wantErr: ErrNoMatch,
	},
	{
		name:  "deletion only",
		files: map[string]string{"lines.txt": "line1\nremove me\nline3\n"},
		patch: patch("*** Update File: lines.txt", "@@", " line1", "-remove me", " line3"),
		want:  map[string]string{"lines.txt": "line1\nline3\n"},
	},
	{
		name:  "update appends a missing trailing newline",
		files: map[string]string{"no_newline.txt": "no newline at end"},
		patch: patch("*** Update File: no_newline.txt", "@@", "-no newline at end", "+first line", "+second line"),
		want:  map[string]string{"no_newline.txt": "first line\nsecond line\n"},
	},
	{
		name:  "update elsewhere still ends the file with a newline",
		files: map[string]string{"f": "a\nb\nc"},
		patch: patch("*** Update File: f", "@@", "-a", "+A"),
		want:  map[string]string{"f": "A\nb\nc\n"},
	},
	{
		name:  "trailing newline kept",
		files: map[string]string{"f": "a\nb\n"},
		patch: patch("*** Update File: f", "@@", " a", "-b", "+B"),
		want:  map[string]string{"f": "a\nB\n"},
	},
	{
		name:  "trailing blank line in the hunk stands for the final newline",
		files: map[string]string{"f": "a\nb\n"},
		patch: patch("*** Update File: f", "@@", " a", "-b", "+B", ""),
		want:  map[string]string{"f": "a\nB\n"},
	},
	{
		name:  "CRLF file keeps CRLF",
		files: map[string]string{"w.txt": "one\r\ntwo\r\nthree\r\n"},
		patch: patch("*** Update File: w.txt", "@@", " one", "-two", "+2", "+2.5", " three"),
		want:  map[string]string{"w.txt": "one\r\n2\r\n2.5\r\nthree\r\n"},
	},
	{
		name:  "CRLF patch on an LF file",
		files: map[string]string{"u.txt": "one\ntwo\n"},
		patch: "*** Begin Patch\r\n*** Update File: u.txt\r\n@@\r\n one\r\n-two\r\n+2\r\n*** End Patch\r\n",
		want:  map[string]string{"u.txt": "one\n2\n"},
	},
	{
		name:  "mixed endings: untouched lines keep theirs",
		files: map[string]string{"m.txt": "a\r\nb\nc\r\n"},
		patch: patch("*** Update File: m.txt", "@@", "-c", "+C"),
		want:  map[string]string{"m.txt": "a\r\nb\nC\r\n"},
	},
	{
		name:  "trailing whitespace ignored, context kept as in the file",
		files: map[string]string{"f": "keep  \t\nold\n"},
		patch: patch("*** Update File: f", "@@", " keep", "-old", "+new"),
		want:  map[string]string{"f": "keep  \t\nnew\n"},
	},
	{
		name:  "surrounding whitespace ignored",
		files: map[string]string{"f": "    if x:\n        y()\n"},
		patch: patch("*** Update File: f", "@@", " if x:", "-    y()", "+        z()"),
		want:  map[string]string{"f": "    if x:\n        z()\n"},
	},
	{
		name:  "unicode punctuation normalised",
		files: map[string]string{"unicode.py": "import asyncio  # local import \u2013 avoids top\u2011level dep\n"},
		patch: patch("*** Update File: unicode.py", "@@", "-import asyncio  # local import - avoids top-level dep", "+import asyncio  # HELLO"),
		want:  map[string]string{"unicode.py": "import asyncio  # HELLO\n"},
	},
	{
		name:  "exact match preferred over a fuzzy earlier one",
		files: map[string]string{"f": "x  \nx\n"},
		patch: patch("*** Update File: f", "@@", "-x", "+y"),
		want:  map[string]string{"f": "x  \ny\n"},
	},
	{
		name:  "move to a new directory",
		files: map[string]string{"old/name.txt": "old content\n", "old/other.txt": "unrelated\n"},
		patch: patch("*** Update File: old/name.txt", "*** Move to: renamed/dir/name.txt", "@@", "-old content", "+new content"),
		want:  map[string]string{"renamed/dir/name.txt": "new content\n", "old/other.txt": "unrelated\n"},
	},
	{
		name:    "move onto an existing file",
		files:   map[string]string{"a": "x\n", "b": "y\n"},
		patch:   patch("*** Update File: a", "*** Move to: b", "@@", "-x", "+z"),
		wantErr: fs.ErrExist, errHas: "move a to b",
	},
	{
		name:  "move onto a file deleted first",
		files: map[string]string{"a": "x\n", "b": "y\n"},
		patch: patch("*** Delete File: b", "*** Update File: a", "*** Move to: b", "@@", "-x", "+z"),
		want:  map[string]string{"b": "z\n"},
	},
	{
		name:  "move to the same path is an update",
		files: map[string]string{"a": "x\n"},
		patch: patch("*** Update File: a", "*** Move to: ./a", "@@", "-x", "+z"),
		want:  map[string]string{"a": "z\n"},
	},
	{
		name:  "add then update",
		patch: patch("*** Add File: n.txt", "+one", "+two", "*** Update File: n.txt", "@@", " one", "-two", "+2"),
		want:  map[string]string{"n.txt": "one\n2\n"},
	},
	{
		name:  "add then delete leaves nothing",
		patch: patch("*** Add File: tmp", "+x", "*** Delete File: tmp"),
		want:  map[string]string{},
	},
	{
		name:  "delete then add replaces",
		files: map[string]string{"f": "old\n"},
		patch: patch("*** Delete File: f", "*** Add File: f", "+new"),
		want:  map[string]string{"f": "new\n"},
	},
	{
		name:    "two adds of one path conflict",
		patch:   patch("*** Add File: f", "+a", "*** Add File: f", "+b"),
		wantErr: fs.ErrExist,
	},
	{
		name:    "two deletes of one path conflict",
		files:   map[string]string{"f": "x"},
		patch:   patch("*** Delete File: f", "*** Delete File: ./f"),
		wantErr: fs.ErrNotExist,
	},
	{
		name:    "update after a move away conflicts",
		files:   map[string]string{"a": "x\n"},
		patch:   patch("*** Update File: a", "*** Move to: b", "@@", "-x", "+y", "*** Update File: a", "@@", "-y", "+z"),
		wantErr: fs.ErrNotExist,
	},
	{
		name:    "a file and a file beneath it",
		patch:   patch("*** Add File: a/b", "+x", "*** Add File: a", "+y"),
		wantErr: ErrConflict, errHas: "leaves a a file and writes a/b beneath it",
	},
	{
		name:    "an existing file and a file beneath it",
		files:   map[string]string{"dir/f": "x\n"},
		patch:   patch("*** Update File: dir/f", "@@", "-x", "+y", "*** Add File: dir/f/g", "+z"),
		wantErr: ErrConflict,
	},
	{
		name:  "delete a file, then add a directory of that name",
		files: map[string]string{"a": "x\n"},
		patch: patch("*** Delete File: a", "*** Add File: a/b", "+y"),
		want:  map[string]string{"a/b": "y\n"},
	},
	{
		name:  "update twice applies in order",
		files: map[string]string{"a": "x\n"},
		patch: patch("*** Update File: a", "@@", "-x", "+y", "*** Update File: a", "@@", "-y", "+z"),
		want:  map[string]string{"a": "z\n"},
	},
	{
		name:  "move chain keeps one removal",
		files: map[string]string{"a": "x\n"},
		patch: patch("*** Update File: a", "*** Move to: b", "@@", "-x", "+y", "*** Update File: b", "*** Move to: c", "@@", "-y", "+z"),
		want:  map[string]string{"c": "z\n"},
	},
	{
		name:  "move then re-add the old path",
		files: map[string]string{"a": "x\n"},
		patch: patch("*** Update File: a", "*** Move to: b", "@@", " x", "+y", "*** Add File: a", "+fresh"),
		want:  map[string]string{"a": "fresh\n", "b": "x\ny\n"},
	},
	{
		name:  "multiple operations",
		files: map[string]string{"delete.txt": "obsolete\n", "modify.txt": "line1\nline2\n"},
		patch: patch("*** Add File: nested/new.txt", "+created", "*** Delete File: delete.txt", "*** Update File: modify.txt", "@@", "-line2", "+changed"),
		want:  map[string]string{"nested/new.txt": "created\n", "modify.txt": "line1\nchanged\n"},
	},
	{
		name:  "whitespace-padded markers",
		files: map[string]string{"file.txt": "one\n"},
		patch: " *** Begin Patch\n  *** Update File: file.txt  \n  @@  \n-one\n+two\n*** End Patch \n",
		want:  map[string]string{"file.txt": "two\n"},
	},
	{
		name:  "blank lines between file operations",
		files: map[string]string{"f": "a\n"},
		patch: "*** Begin Patch\n\n*** Add File: n\n+x\n\n\n*** Delete File: f\n\n*** End Patch\n",
		want:  map[string]string{"n": "x\n"},
	},
	{
		name:  "heredoc wrapper",
		files: map[string]string{"f": "a\n"},
		patch: "<<'EOF'\n*** Begin Patch\n*** Update File: f\n@@\n-a\n+b\n*** End Patch\nEOF\n",
		want:  map[string]string{"f": "b\n"},
	},
	{
		name:  "heredoc with the command",
		patch: "apply_patch <<'PATCH'\n*** Begin Patch\n*** Add File: foo\n+hi\n*** End Patch\nPATCH",
		want:  map[string]string{"foo": "hi\n"},
	},
	{
		name:  "update of an empty file",
		files: map[string]string{"e": ""},
		patch: patch("*** Update File: e", "@@", "+first"),
		want:  map[string]string{"e": "first\n"},
	},
	{
		name:  "delete every line",
		files: map[string]string{"f": "a\nb\n"},
		patch: patch("*** Update File: f", "@@", "-a", "-b"),
		want:  map[string]string{"f": ""},
	},
}

func TestPlan(t *testing.T) {
	for _, tc := range planCases {
		t.Run(tc.name, func(t *testing.T) {
			ops, err := Parse(tc.patch)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			reads := map[string]int{}
			changes, err := Plan(ops, readMap(tc.files, reads))
			for p, n := range reads {
				if n != 1 {
					t.Errorf("%s read %d times", p, n)
				}
			}
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("err = %v, want %v", err, tc.wantErr)
				}
				if !strings.Contains(err.Error(), tc.errHas) {
					t.Errorf("err = %q, want it to contain %q", err, tc.errHas)
				}
				if changes != nil {
					t.Errorf("changes = %+v on error, want none", changes)
				}
				return
			}
			if err != nil {
				t.Fatalf("Plan: %v", err)
			}
			got := applyChanges(t, tc.files, changes)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("files (-want +got):\n%s", diff)
			}
		})
	}
}

func TestPlanMoveChange(t *testing.T) {
	ops, err := Parse(patch("*** Update File: a", "*** Move to: b", "@@", "-x", "+y"))
	if err != nil {
		t.Fatal(err)
	}
	changes, err := Plan(ops, readMap(map[string]string{"a": "x\n"}, nil))
	if err != nil {
		t.Fatal(err)
	}
	want := []Change{{Path: "b", Content: []byte("y\n"), From: "a"}}
	if diff := cmp.Diff(want, changes); diff != "" {
		t.Errorf("changes (-want +got):\n%s", diff)
	}
}

func TestPlanReadError(t *testing.T) {
	boom := errors.New("boom")
	ops, err := Parse(patch("*** Delete File: a"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = Plan(ops, func(string) ([]byte, error) { return nil, boom })
	if !errors.Is(err, boom) {
		t.Fatalf("err = %v, want boom", err)
	}
}

// parseErrCases are malformed patches; each error names its line.
var parseErrCases = []struct {
	name   string
	patch  string
	line   int
	errHas string
}{
	{name: "empty", patch: "", line: 1, errHas: "empty"},
	{name: "blank lines only", patch: " \n\t\n \n", line: 1, errHas: "empty"},
	{name: "heredoc around one line", patch: "<<'EOF'\n*** Begin Patch\nEOF\n", line: 2, errHas: "'*** End Patch'"},
	{name: "missing Begin", patch: "*** Add File: a\n+x\n*** End Patch", line: 1, errHas: "'*** Begin Patch' as the first line"},
	{name: "missing End", patch: "*** Begin Patch\n*** Add File: a\n+x\n", line: 3, errHas: "'*** End Patch' as the last line"},
	{name: "Begin only", patch: "*** Begin Patch\n", line: 1, errHas: "'*** End Patch'"},
	{name: "no operation", patch: "*** Begin Patch\n*** End Patch", line: 2, errHas: "no file operation"},
	{name: "bad header", patch: "*** Begin Patch\n*** Frobnicate File: a\n*** End Patch", line: 2, errHas: "expected '*** Add File: <path>'"},
	{name: "add line without plus", patch: "*** Begin Patch\n*** Add File: a\n+x\ny\n*** End Patch", line: 4, errHas: "starts with '+'"},
	{name: "empty path", patch: "*** Begin Patch\n*** Delete File:   \n*** End Patch", line: 2, errHas: "without a path"},
	{name: "empty update", patch: "*** Begin Patch\n*** Update File: test.py\n*** End Patch", line: 2, errHas: "has no hunk"},
	{name: "empty move", patch: "*** Begin Patch\n*** Update File: a\n*** Move to: \n@@\n-x\n+y\n*** End Patch", line: 3, errHas: "without a path"},
	{name: "bad line prefix first", patch: "*** Begin Patch\n*** Update File: a\n@@\nbad\n*** End Patch", line: 4, errHas: "a hunk line starts with ' '"},
	{name: "bad line prefix later", patch: "*** Begin Patch\n*** Update File: a\n@@\n-x\n+y\nbad\n*** End Patch", line: 6, errHas: "a hunk line starts with ' '"},
	{name: "hunk with no lines", patch: "*** Begin Patch\n*** Update File: a\n@@ def f\n*** End Patch", line: 3, errHas: "no lines"},
	{name: "End of File without lines", patch: "*** Begin Patch\n*** Update File: a\n@@\n*** End of File\n*** End Patch", line: 4, errHas: "must follow a hunk's lines"},
	{name: "lines after End of File without @@", patch: "*** Begin Patch\n*** Update File: a\n@@\n-x\n+y\n*** End of File\n-z\n*** End Patch", line: 7, errHas: "expected '@@' to start a new hunk"},
	{name: "tab-only line ends a hunk", patch: "*** Begin Patch\n*** Update File: a\n@@\n-x\n\tfoo\n*** End Patch", line: 5, errHas: "a hunk line starts with ' '"},
	{name: "heredoc without End", patch: "<<'EOF'\n*** Begin Patch\n*** Add File: a\n+x\nEOF", line: 4, errHas: "'*** End Patch'"},
	{name: "line numbers count leading blank lines", patch: "\n\n*** Begin Patch\n*** Nope\n*** End Patch", line: 4, errHas: "expected"},
}

func TestParseErrors(t *testing.T) {
	for _, tc := range parseErrCases {
		t.Run(tc.name, func(t *testing.T) {
			ops, err := Parse(tc.patch)
			var pe *ParseError
			if !errors.As(err, &pe) || !errors.Is(err, ErrInvalidPatch) {
				t.Fatalf("Parse = %+v, %v; want a *ParseError", ops, err)
			}
			if pe.Line != tc.line || !strings.Contains(pe.Msg, tc.errHas) {
				t.Errorf("err = %q (line %d), want line %d and %q", err, pe.Line, tc.line, tc.errHas)
			}
		})
	}
}

func TestParse(t *testing.T) {
	got, err := Parse("*** Begin Patch\n" +
		"*** Add File: path/add.py\n+abc\n+def\n" +
		"*** Delete File: path/delete.py\n" +
		"*** Update File: path/update.py\n*** Move to: path/update2.py\n@@ def f():\n-    pass\n+    return 123\n" +
		"@@\n x\n+y\n*** End of File\n" +
		"*** End Patch")
	if err != nil {
		t.Fatal(err)
	}
	want := []Op{
		{Kind: Add, Path: "path/add.py", Content: "abc\ndef\n", At: 2},
		{Kind: Delete, Path: "path/delete.py", At: 5},
		{Kind: Update, Path: "path/update.py", MoveTo: "path/update2.py", At: 6, Hunks: []Hunk{
			{Anchors: []string{"def f():"}, Lines: []Line{{Removed, "    pass"}, {Added, "    return 123"}}, At: 8},
			{Lines: []Line{{Context, "x"}, {Added, "y"}}, EOF: true, At: 11},
		}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Parse (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"    pass"}, got[2].Hunks[0].Old()); diff != "" {
		t.Errorf("Old (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"x", "y"}, got[2].Hunks[1].New()); diff != "" {
		t.Errorf("New (-want +got):\n%s", diff)
	}
}

func TestNumber(t *testing.T) {
	long := strings.Repeat("é", MaxLineRunes+5)
	cases := []struct {
		name          string
		content       string
		offset, limit int
		want          string
		wantErr       error
	}{
		{name: "all", content: "a\nb\n", want: "     1\ta\n     2\tb\n"},
		{name: "no trailing newline", content: "a\nb", want: "     1\ta\n     2\tb\n"},
		{name: "offset and limit", content: "a\nb\nc\nd\n", offset: 2, limit: 2, want: "     2\tb\n     3\tc\n"},
		{name: "offset 1 is the start", content: "a\n", offset: 1, want: "     1\ta\n"},
		{name: "CR not shown", content: "a\r\nb\r\n", want: "     1\ta\n     2\tb\n"},
		{name: "empty lines numbered", content: "\n\nx", want: "     1\t\n     2\t\n     3\tx\n"},
		{name: "empty file", content: "", want: ""},
		{name: "past the end", content: "a\nb\n", offset: 3, wantErr: ErrOffset},
		{name: "negative", content: "a", offset: -1, wantErr: ErrOffset},
		{name: "long line cut at a character", content: long + "\n", want: "     1\t" + strings.Repeat("é", MaxLineRunes) + "\n"},
		{name: "wide numbers", content: strings.Repeat("x\n", 1000000), offset: 1000000, want: "1000000\tx\n"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Number(tc.content, tc.offset, tc.limit)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("err = %v, want %v", err, tc.wantErr)
			}
			if got != tc.want {
				t.Errorf("Number = %q, want %q", got, tc.want)
			}
		})
	}
	var many strings.Builder
	for range 3000 {
		many.WriteString("l\n")
	}
	got, err := Number(many.String(), 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(got, "\n"); n != DefaultLimit {
		t.Errorf("default limit gave %d lines, want %d", n, DefaultLimit)
	}
	if Lines(many.String()) != 3000 || Lines("a") != 1 || Lines("") != 0 || Lines("a\nb") != 2 {
		t.Error("Lines miscounts")
	}
}

func TestIsBinary(t *testing.T) {
	latin1 := []byte("caf\xe9 na\xefve r\xe9sum\xe9 and a long enough English sentence around them")
	cases := []struct {
		name string
		b    []byte
		want bool
	}{
		{"empty", nil, false},
		{"ascii", []byte("hello\n"), false},
		{"utf-8", []byte("naïve café — “quotes”\n"), false},
		{"NUL", []byte("ab\x00cd"), true},
		{"NUL late in the sniff", append([]byte(strings.Repeat("a", BinarySniff-1)), 0), true},
		{"NUL past the sniff", append([]byte(strings.Repeat("a", BinarySniff)), 0), false},
		{"latin-1 text", latin1, false},
		{"invalid heavy", []byte("\xff\xfe\xfd\xfc\xfb\xfa abc"), true},
		{"continuation bytes alone", []byte(strings.Repeat("\x80", 64)), true},
		{"rune cut by the sniff", append([]byte(strings.Repeat("a", BinarySniff-1)), "é"...), false},
		{"png header", []byte("\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR"), true},
	}
	for _, tc := range cases {
		if got := IsBinary(tc.b); got != tc.want {
			t.Errorf("%s: IsBinary = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestPlanWorkBounded: hunks that each match only on the last, most lenient
// pass make every earlier pass scan the rest of the file: lines × hunks.
// Plan stops when its budget runs out, with ErrTooComplex; the same patch
// applies within MaxWork, so the budget is what stopped it.
func TestPlanWorkBounded(t *testing.T) {
	const lines, hunks = 2000, 1000
	file := strings.Repeat("x\u2013y\n", lines)
	var p strings.Builder
	p.WriteString("*** Begin Patch\n*** Update File: big\n")
	for range hunks {
		p.WriteString("@@ x-y\n+z\n")
	}
	p.WriteString("*** End Patch\n")
	ops, err := Parse(p.String())
	if err != nil {
		t.Fatal(err)
	}
	read := readMap(map[string]string{"big": file}, nil)
	if _, err := plan(ops, read, 1_000_000); !errors.Is(err, ErrTooComplex) {
		t.Fatalf("err = %v, want ErrTooComplex", err)
	}
	w := &work{left: MaxWork}
	out, err := applyHunks([]byte(file), ops[0].Hunks, w)
	if err != nil {
		t.Fatal(err)
	}
	if used := MaxWork - w.left; used <= 1_000_000 {
		t.Errorf("the patch took %d steps, not more than the budget that stopped it", used)
	}
	if got := strings.Count(string(out), "z\n"); got != hunks {
		t.Errorf("%d insertions, want %d", got, hunks)
	}
}

// TestPlanLargeWithinWork: a thousand exact hunks spread over a
// 100,000-line file stay well within MaxWork.
func TestPlanLargeWithinWork(t *testing.T) {
	var file, p strings.Builder
	for i := range 100000 {
		fmt.Fprintf(&file, "line %d\n", i)
	}
	p.WriteString("*** Begin Patch\n*** Update File: big\n")
	for h := range 1000 {
		fmt.Fprintf(&p, "@@\n line %d\n-line %d\n+LINE %d\n", h*100, h*100+1, h*100+1)
	}
	p.WriteString("*** End Patch\n")
	ops, err := Parse(p.String())
	if err != nil {
		t.Fatal(err)
	}
	changes, err := Plan(ops, readMap(map[string]string{"big": file.String()}, nil))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Count(string(changes[0].Content), "LINE"); got != 1000 {
		t.Errorf("%d lines changed, want 1000", got)
	}
}

// TestKMPCountsLongLines: comparing long lines of equal length costs their
// bytes, and the steps say so, so long lines cannot slip past MaxWork.
func TestKMPCountsLongLines(t *testing.T) {
	long := strings.Repeat("a", 6400)
	keys := make([]string, 100)
	for i := range keys {
		keys[i] = long
	}
	i, steps := kmp(keys, []string{long, long + "b"}, 0)
	if i != -1 {
		t.Fatalf("kmp found %d", i)
	}
	if steps < 100*100 {
		t.Errorf("steps = %d for 100 comparisons of 6,400 bytes, want at least %d", steps, 100*100)
	}
	if _, short := kmp([]string{"a", "b", "c"}, []string{"c"}, 0); short > 6 {
		t.Errorf("steps = %d for 3 short lines, want at most 6", short)
	}
}

func TestPlanLeniency(t *testing.T) {
	cases := []struct {
		name, file, patch, want string
	}{
		{
			name:  "byte-order mark on the first line",
			file:  "\ufeffpackage main\nfunc main() {}\n",
			patch: patch("*** Update File: f", "@@", " package main", "-func main() {}", "+func main() { run() }"),
			want:  "\ufeffpackage main\nfunc main() { run() }\n",
		},
		{
			name:  "unified diff's no-newline marker",
			file:  "a\nb",
			patch: patch("*** Update File: f", "@@", " a", "-b", `\ No newline at end of file`, "+c"),
			want:  "a\nc\n",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ops, err := Parse(tc.patch)
			if err != nil {
				t.Fatal(err)
			}
			changes, err := Plan(ops, readMap(map[string]string{"f": tc.file}, nil))
			if err != nil {
				t.Fatal(err)
			}
			if got := string(changes[0].Content); got != tc.want {
				t.Errorf("content = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestKMP checks the search against a plain one on patterns whose prefixes
// repeat, where Knuth–Morris–Pratt's failure links matter.
func TestKMP(t *testing.T) {
	naive := func(keys, pat []string, start int) int {
		for i := start; i+len(pat) <= len(keys); i++ {
			if equalAt(keys, pat, i) {
				return i
			}
		}
		return -1
	}
	split := func(s string) []string { return strings.Split(s, "") }
	for _, tc := range []struct{ keys, pat string }{
		{"aaab", "aab"},
		{"abababc", "ababc"},
		{"abaabaabab", "abaabab"},
		{"aabaabaaa", "aabaaa"},
		{"abcabcabd", "abcabd"},
		{"ababab", "abab"},
		{"xyz", "xyzw"},
		{"aaaa", "b"},
	} {
		keys, pat := split(tc.keys), split(tc.pat)
		for start := 0; start <= len(keys); start++ {
			want := naive(keys, pat, start)
			if got, _ := kmp(keys, pat, start); got != want {
				t.Errorf("kmp(%q, %q, %d) = %d, want %d", tc.keys, tc.pat, start, got, want)
			}
		}
	}
	// Random patterns of up to 9 lines over three values, in texts over them.
	r := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		keys := make([]string, r.IntN(24))
		for i := range keys {
			keys[i] = string(rune('a' + r.IntN(3)))
		}
		pat := make([]string, 1+r.IntN(9))
		for i := range pat {
			pat[i] = string(rune('a' + r.IntN(3)))
		}
		start := r.IntN(len(keys) + 1)
		if got, _ := kmp(keys, pat, start); got != naive(keys, pat, start) {
			t.Fatalf("kmp(%q, %q, %d) = %d, want %d", keys, pat, start, got, naive(keys, pat, start))
		}
	}
}
