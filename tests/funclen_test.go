package tests

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// maxFuncLines is the most lines a hand-written function may span, from
// its func line to its closing brace.
const maxFuncLines = 80

// TestFuncLen fails for a hand-written function over maxFuncLines lines
// (generated code and tests left out): the longest were split where their
// own comments named the steps, and no new one grows past the bound.
// `make funclen` runs it with -v, listing every function over 60 lines.
func TestFuncLen(t *testing.T) {
	t.Parallel()
	funcs := longFuncs(t, "..", 60)
	for _, f := range funcs {
		t.Logf("%4d %s (%s)", f.lines, f.name, f.pos)
		if f.lines <= maxFuncLines {
			continue
		}
		t.Errorf("%s: %s is %d lines, over %d: split it where its comments name the steps", f.pos, f.name, f.lines, maxFuncLines)
	}
	if len(funcs) < 5 {
		t.Errorf("found %d functions over 60 lines; the scan has stopped finding functions", len(funcs))
	}
}

type longFunc struct {
	name  string // "internal/run Service.start"
	pos   string // file:line
	lines int
}

// longFuncs returns the hand-written functions (not in _test.go files nor
// in files marked generated) over `over` lines below root, longest first.
func longFuncs(t *testing.T, root string, over int) []longFunc {
	t.Helper()
	fset := token.NewFileSet()
	var out []longFunc
	for _, p := range sourceFiles(t, root) {
		if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, p, nil, parser.ParseComments|parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		if ast.IsGenerated(f) {
			continue
		}
		for _, decl := range f.Decls {
			fd, ok := decl.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			start, end := fset.Position(fd.Pos()), fset.Position(fd.End())
			if n := end.Line - start.Line + 1; n > over {
				dir := filepath.ToSlash(filepath.Dir(shown(p)))
				out = append(out, longFunc{name: dir + " " + funcName(fd), pos: fmt.Sprintf("%s:%d", shown(p), start.Line), lines: n})
			}
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].lines != out[j].lines {
			return out[i].lines > out[j].lines
		}
		return out[i].name < out[j].name
	})
	return out
}

// funcName is a function's name, its receiver's type before it for a
// method ("Service.start").
func funcName(fd *ast.FuncDecl) string {
	if fd.Recv == nil || len(fd.Recv.List) == 0 {
		return fd.Name.Name
	}
	typ := fd.Recv.List[0].Type
	for {
		switch x := typ.(type) {
		case *ast.StarExpr:
			typ = x.X
			continue
		case *ast.IndexExpr:
			typ = x.X
			continue
		case *ast.IndexListExpr:
			typ = x.X
			continue
		case *ast.Ident:
			return x.Name + "." + fd.Name.Name
		}
		return fd.Name.Name
	}
}
