package tests

import (
	"encoding/json"
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/dshd/dshd/"

// TestLayoutFloors keeps the layout's floors true (docs/design.md#floors):
// a package's floor is 0 when it imports no other package of dshd, else one
// above the highest floor it imports, so every import points down. Each
// package of the server (what cmd/dshd is built from, generated code left
// out) says its floor in its package doc ("Floor N of the layout"), and
// the table in docs/design.md lists each package on its floor.
func TestLayoutFloors(t *testing.T) {
	t.Parallel()
	pkgs := serverPackages(t)
	floors := map[string]int{}
	var floorOf func(p string) int
	floorOf = func(p string) int {
		if f, ok := floors[p]; ok {
			return f
		}
		f := 0
		for _, q := range pkgs[p].imports {
			f = max(f, floorOf(q)+1)
		}
		floors[p] = f
		return f
	}
	table := floorTable(t, readPage(t, "../docs/design.md"))
	docFloor := regexp.MustCompile(`Floor (\d+) of the layout`)
	for p, pkg := range pkgs {
		if pkg.generated {
			continue
		}
		want := floorOf(p)
		m := docFloor.FindStringSubmatch(pkg.doc)
		switch {
		case m == nil:
			t.Errorf("%s: its package doc does not say its floor (\"Floor %d of the layout (docs/design.md#floors)\")", p, want)
		case m[1] != strconv.Itoa(want):
			t.Errorf("%s: its package doc says floor %s; it is on floor %d (imports %v)", p, m[1], want, pkg.imports)
		}
		if got, ok := table[p]; !ok || got != want {
			t.Errorf("docs/design.md#floors: %s on floor %d (listed: %v), want %d", p, got, ok, want)
		}
		delete(table, p)
	}
	for p := range table {
		t.Errorf("docs/design.md#floors lists %s, which is not a package of the server", p)
	}
	if len(pkgs) < 20 {
		t.Errorf("found %d packages in the server; the listing has stopped finding them", len(pkgs))
	}
}

type layoutPackage struct {
	imports   []string // dshd's own, without the module prefix
	doc       string
	generated bool
}

// serverPackages lists the packages cmd/dshd is built from (so not the
// tests' helpers), by their path without the module prefix.
func serverPackages(t *testing.T) map[string]layoutPackage {
	t.Helper()
	cmd := exec.Command("go", "list", "-deps", "-json=ImportPath,Dir,GoFiles,Imports", "./cmd/dshd")
	cmd.Dir = ".."
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	pkgs := map[string]layoutPackage{}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for {
		var p struct {
			ImportPath, Dir string
			GoFiles         []string
			Imports         []string
		}
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(p.ImportPath, module) {
			continue
		}
		var pkg layoutPackage
		for _, q := range p.Imports {
			if strings.HasPrefix(q, module) {
				pkg.imports = append(pkg.imports, strings.TrimPrefix(q, module))
			}
		}
		for _, f := range p.GoFiles {
			file, err := parser.ParseFile(token.NewFileSet(), filepath.Join(p.Dir, f), nil, parser.PackageClauseOnly|parser.ParseComments)
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case ast.IsGenerated(file):
				pkg.generated = true
			case file.Doc != nil:
				pkg.doc += file.Doc.Text()
			}
		}
		// A package documented only by generated code is generated.
		pkg.generated = pkg.generated && pkg.doc == ""
		slices.Sort(pkg.imports)
		pkgs[strings.TrimPrefix(p.ImportPath, module)] = pkg
	}
	return pkgs
}

// floorTable reads the table of the section #floors: "| N | `a`, `b` |".
func floorTable(t *testing.T, page string) map[string]int {
	t.Helper()
	_, section, ok := strings.Cut(page, "\n### Floors\n")
	if !ok {
		t.Fatal("docs/design.md has no section ### Floors")
	}
	section, _, _ = strings.Cut(section, "\n#")
	row := regexp.MustCompile("(?m)^\\| (\\d+) \\| (.*) \\|$")
	name := regexp.MustCompile("`([a-z/]+)`")
	table := map[string]int{}
	for _, m := range row.FindAllStringSubmatch(section, -1) {
		f, _ := strconv.Atoi(m[1])
		for _, n := range name.FindAllStringSubmatch(m[2], -1) {
			table[n[1]] = f
		}
	}
	if len(table) < 20 {
		t.Fatalf("docs/design.md#floors: found %d packages in its table", len(table))
	}
	return table
}
