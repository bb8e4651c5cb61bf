package edits

import (
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"testing"
)

// FuzzParse checks that Parse and Plan never panic, that Parse's errors name
// a line of the input, and that what Parse accepts and Plan computes is well
// formed. Seeds are the tables' patches.
func FuzzParse(f *testing.F) {
	for _, tc := range planCases {
		content := ""
		for _, c := range tc.files {
			content = c
			break
		}
		f.Add(tc.patch, content)
	}
	for _, tc := range parseErrCases {
		f.Add(tc.patch, "a\nb\n")
	}
	f.Add(patch("*** Update File: f", "@@ a", "@@ -1 +1 @@ b", " c", "-d", "+e", "*** End of File"), "a\r\nb\r\nc\r\nd\r\n")
	f.Fuzz(func(t *testing.T, input, content string) {
		ops, err := Parse(input)
		if err != nil {
			var pe *ParseError
			if !errors.As(err, &pe) || !errors.Is(err, ErrInvalidPatch) {
				t.Fatalf("Parse error %v is not a *ParseError", err)
			}
			if n := strings.Count(input, "\n") + 1; pe.Line < 1 || pe.Line > n {
				t.Fatalf("error line %d outside the input's %d lines: %v", pe.Line, n, err)
			}
			return
		}
		if len(ops) == 0 {
			t.Fatal("Parse accepted a patch with no operation")
		}
		for _, op := range ops {
			if op.Path == "" || op.Kind < Add || op.Kind > Update {
				t.Fatalf("bad op %+v", op)
			}
			if op.Kind == Update {
				if len(op.Hunks) == 0 {
					t.Fatalf("update without hunks: %+v", op)
				}
				for _, h := range op.Hunks {
					if len(h.Lines) == 0 {
						t.Fatalf("hunk without lines: %+v", op)
					}
				}
			}
		}
		// Paths of even length exist and hold content; the others are absent.
		read := func(p string) ([]byte, error) {
			if len(p)%2 == 0 {
				return []byte(content), nil
			}
			return nil, fs.ErrNotExist
		}
		changes, err := Plan(ops, read)
		if err != nil {
			if changes != nil {
				t.Fatalf("changes %+v with error %v", changes, err)
			}
			return
		}
		named := map[string]bool{}
		for _, c := range changes {
			for _, p := range []string{c.Path, c.From} {
				if p != "" && named[p] {
					t.Fatalf("%s named twice in %+v", p, changes)
				}
				named[p] = true
			}
			if c.Delete == (c.Content != nil) {
				t.Fatalf("change %+v: content must be set exactly when not deleting", c)
			}
		}
	})
}

// FuzzReplace checks that Replace never panics and, without CR anywhere,
// agrees with strings.Replace.
func FuzzReplace(f *testing.F) {
	for _, tc := range replaceCases {
		f.Add(tc.content, tc.old, tc.new, tc.all)
	}
	f.Fuzz(func(t *testing.T, content, old, new string, all bool) {
		got, n, err := Replace(content, old, new, all)
		if err != nil || strings.Contains(content+old+new, "\r") || old == "" {
			return
		}
		if want := strings.Replace(content, old, new, -1); got != want || n != strings.Count(content, old) {
			t.Fatalf("Replace(%q, %q, %q) = %q, %d; want %q", content, old, new, got, n, want)
		}
		if !all && n != 1 {
			t.Fatalf("replaced %d without all", n)
		}
	})
}

// benchFile is a 2,000-line file and a patch of 10 hunks spread through it,
// each with three lines of context either side, as Codex's instructions ask.
func benchFile() (string, string) {
	var file strings.Builder
	for i := range 2000 {
		fmt.Fprintf(&file, "\tline %d: some code here, x := compute(%d)\n", i, i)
	}
	var p strings.Builder
	p.WriteString("*** Begin Patch\n*** Update File: big.go\n")
	for h := range 10 {
		at := 100 + h*190
		p.WriteString("@@\n")
		for i := at - 3; i < at; i++ {
			fmt.Fprintf(&p, " \tline %d: some code here, x := compute(%d)\n", i, i)
		}
		fmt.Fprintf(&p, "-\tline %d: some code here, x := compute(%d)\n", at, at)
		fmt.Fprintf(&p, "+\tline %d: changed, x := compute(%d) + 1\n", at, at)
		for i := at + 1; i < at+4; i++ {
			fmt.Fprintf(&p, " \tline %d: some code here, x := compute(%d)\n", i, i)
		}
	}
	p.WriteString("*** End Patch\n")
	return file.String(), p.String()
}

// BenchmarkPlanUpdate parses and plans a 10-hunk patch of a 2,000-line
// file. Its baseline splits the file into lines and joins them again, the
// least any line-based apply does; "fuzzy" makes every hunk match only on
// the whitespace-trimmed pass.
func BenchmarkPlanUpdate(b *testing.B) {
	file, p := benchFile()
	run := func(b *testing.B, file, p string) {
		read := func(string) ([]byte, error) { return []byte(file), nil }
		b.SetBytes(int64(len(file)))
		for b.Loop() {
			ops, err := Parse(p)
			if err != nil {
				b.Fatal(err)
			}
			ch, err := Plan(ops, read)
			if err != nil || len(ch) != 1 {
				b.Fatal(err)
			}
		}
	}
	b.Run("baseline-split-join", func(b *testing.B) {
		b.SetBytes(int64(len(file)))
		for b.Loop() {
			_ = []byte(strings.Join(strings.Split(file, "\n"), "\n"))
		}
	})
	b.Run("exact", func(b *testing.B) { run(b, file, p) })
	b.Run("fuzzy", func(b *testing.B) {
		run(b, strings.ReplaceAll(file, "\n", "  \n"), p)
	})
}

// BenchmarkPlanHostile is the search's worst case: a pattern that almost
// matches everywhere (100,000 equal lines, a 1,000-line pattern of them
// ending in one that is not there). Knuth–Morris–Pratt keeps it linear.
func BenchmarkPlanHostile(b *testing.B) {
	file := strings.Repeat("a\n", 100000)
	var p strings.Builder
	p.WriteString("*** Begin Patch\n*** Update File: f\n@@\n")
	for range 1000 {
		p.WriteString(" a\n")
	}
	p.WriteString("-b\n*** End Patch\n")
	ops, err := Parse(p.String())
	if err != nil {
		b.Fatal(err)
	}
	read := func(string) ([]byte, error) { return []byte(file), nil }
	for b.Loop() {
		if _, err := Plan(ops, read); !errors.Is(err, ErrNoMatch) {
			b.Fatal(err)
		}
	}
}

// BenchmarkPlanOverBudget is the longest a hostile patch can keep Plan busy:
// 20,000 hunks on a 200,000-line file, each matching only on the most
// lenient pass, run until MaxWork stops them.
func BenchmarkPlanOverBudget(b *testing.B) {
	file := strings.Repeat("x\u2013y\n", 200000)
	var p strings.Builder
	p.WriteString("*** Begin Patch\n*** Update File: big\n")
	for range 20000 {
		p.WriteString("@@ x-y\n+z\n")
	}
	p.WriteString("*** End Patch\n")
	ops, err := Parse(p.String())
	if err != nil {
		b.Fatal(err)
	}
	read := func(string) ([]byte, error) { return []byte(file), nil }
	for b.Loop() {
		if _, err := Plan(ops, read); !errors.Is(err, ErrTooComplex) {
			b.Fatal(err)
		}
	}
}

// BenchmarkPlanDeepPath: the check that no file is left beneath another
// looks at each path's parents; a hostile path of 100,000 components costs
// linear time.
func BenchmarkPlanDeepPath(b *testing.B) {
	ops := []Op{
		{Kind: Add, Path: strings.Repeat("d/", 100000) + "f", Content: "x\n"},
		{Kind: Add, Path: strings.Repeat("d/", 99999) + "e", Content: "y\n"},
	}
	read := func(string) ([]byte, error) { return nil, fs.ErrNotExist }
	for b.Loop() {
		if _, err := Plan(ops, read); err != nil {
			b.Fatal(err)
		}
	}
}
