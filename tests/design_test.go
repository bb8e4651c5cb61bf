package tests

import (
	"fmt"
	"io/fs"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestDesignCitations checks that every source comment citing the design
// cites a section of docs/design.md that exists: docs/design.md#<anchor>
// names one of its headings, and an invariant or step cited after it
// ("docs/design.md#invariants, invariant 10", "…, steps 1–4") is one of
// that section's numbered items. Citations of a design document outside
// the repository (by section sign or number alone) are refused: whoever
// clones the repository cannot follow them.
func TestDesignCitations(t *testing.T) {
	t.Parallel()
	design := parseDesign(readPage(t, "../docs/design.md"))
	if len(design.items["invariants"]) < 10 || len(design.items["child-environment"]) != 5 {
		t.Fatalf("docs/design.md: invariants %v, environment steps %v: the parser has stopped finding the numbered items",
			design.items["invariants"], design.items["child-environment"])
	}
	cited := 0
	for _, f := range sourceFiles(t, "..") {
		for i, line := range strings.Split(readPage(t, f), "\n") {
			n, problems := design.check(line)
			cited += n
			for _, p := range problems {
				t.Errorf("%s:%d: %s", shown(f), i+1, p)
			}
		}
	}
	if cited < 10 {
		t.Errorf("found %d citations of docs/design.md in the sources; the citation parser has stopped finding them", cited)
	}

	// The checker itself: each of these lines must be refused. (The
	// citations are put together so that this file holds none.)
	page := "docs/design" + ".md"
	for _, bad := range []string{
		"// see " + page + "#no-such-section",
		"// (" + page + "#invariants, invariant 99)",
		"// " + page + "#child-environment, steps 4–6",
		"// " + page + "#what-dshd-promises, step 1",
		"// per " + "DESIGN" + " §3",
		"// " + "DESIGN" + " invariant 10",
		"// design.md " + "§3",
	} {
		if _, problems := design.check(bad); len(problems) == 0 {
			t.Errorf("the check passed %q, want it refused", bad)
		}
	}
	if n, problems := design.check("// " + page + "#invariants, invariants 1–4, and " + page + "#child-environment, step 5"); n != 2 || len(problems) != 0 {
		t.Errorf("the check of two good citations = %d, %v; want 2, none", n, problems)
	}
}

type designDoc struct {
	anchors map[string]bool
	// items is, per section anchor, the numbers of its numbered list.
	items map[string]map[int]bool
}

var (
	designCitation = regexp.MustCompile(`docs/design\.md(?:#([\w-]+))?(?:,\s*(?:invariants?|steps?)\s+(\d+)(?:\s*(?:–|-|to)\s*(\d+))?)?`)
	// outsideCitation is a citation by section sign or number alone, of a
	// design document the repository does not hold.
	outsideCitation = regexp.MustCompile(`(?:DESIGN|design\.md)\s*(?:§|section\s+\d|invariants?\s+\d)`)
	numberedItem    = regexp.MustCompile(`^(\d+)\.\s`)
)

func parseDesign(page string) designDoc {
	d := designDoc{anchors: headingAnchors(page), items: map[string]map[int]bool{}}
	section := ""
	for _, line := range strings.Split(page, "\n") {
		if m := atxHeading.FindStringSubmatch(line); m != nil {
			section = githubSlug(m[2])
			continue
		}
		if m := numberedItem.FindStringSubmatch(line); m != nil {
			n, _ := strconv.Atoi(m[1])
			if d.items[section] == nil {
				d.items[section] = map[int]bool{}
			}
			d.items[section][n] = true
		}
	}
	return d
}

// check returns how many citations of docs/design.md line holds and what
// is wrong with them.
func (d designDoc) check(line string) (int, []string) {
	var problems []string
	if m := outsideCitation.FindString(line); m != "" {
		problems = append(problems, fmt.Sprintf("%q cites a design by number: cite docs/design.md#<section> instead", m))
	}
	ms := designCitation.FindAllStringSubmatch(line, -1)
	for _, m := range ms {
		anchor, from, to := m[1], m[2], m[3]
		if anchor == "" {
			continue // the page as a whole
		}
		if !d.anchors[anchor] {
			problems = append(problems, fmt.Sprintf("docs/design.md has no section #%s", anchor))
			continue
		}
		if from == "" {
			continue
		}
		if to == "" {
			to = from
		}
		a, _ := strconv.Atoi(from)
		b, _ := strconv.Atoi(to)
		for n := a; n <= b; n++ {
			if !d.items[anchor][n] {
				problems = append(problems, fmt.Sprintf("docs/design.md#%s has no item %d", anchor, n))
				break
			}
		}
	}
	return len(ms), problems
}

// sourceFiles lists the repository's source files whose comments may cite
// the design, leaving out dependencies and the git directory.
func sourceFiles(t *testing.T, root string) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case ".git", "node_modules", "vendor", "dist", "_build":
				return filepath.SkipDir
			}
			return nil
		}
		switch filepath.Ext(p) {
		case ".go", ".ts", ".py", ".sh", ".js", ".yaml":
			files = append(files, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 100 {
		t.Fatalf("found %d source files under %s", len(files), root)
	}
	return files
}
