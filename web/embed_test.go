package web

import (
	"io/fs"
	"regexp"
	"strings"
	"testing"
)

// TestAssetsResolve checks that every file the pages reference is embedded:
// the scripts and stylesheet of index.html and every relative ES module import.
func TestAssetsResolve(t *testing.T) {
	fsys := FS()
	index, err := fs.ReadFile(fsys, "index.html")
	if err != nil {
		t.Fatalf("read index.html: %v", err)
	}
	refs := map[string]string{}
	for _, m := range regexp.MustCompile(`(?:src|href)="([^"#:]+)"`).FindAllStringSubmatch(string(index), -1) {
		refs[m[1]] = "index.html"
	}
	scripts, err := fs.Glob(fsys, "*.js")
	if err != nil {
		t.Fatal(err)
	}
	importRE := regexp.MustCompile(`(?m)^import .* from '\./([^']+)';$`)
	for _, name := range scripts {
		src, err := fs.ReadFile(fsys, name)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range importRE.FindAllStringSubmatch(string(src), -1) {
			refs[m[1]] = name
		}
	}
	if _, ok := refs["app.js"]; !ok {
		t.Errorf("index.html does not load app.js")
	}
	for ref, from := range refs {
		if _, err := fs.Stat(fsys, strings.TrimPrefix(ref, "./")); err != nil {
			t.Errorf("%s references %q, which is not embedded: %v", from, ref, err)
		}
	}
}

// TestNoInlineHandlersOrHTMLInjection guards the UI's XSS rules: no inline
// event handler attributes and no innerHTML/outerHTML/insertAdjacentHTML.
func TestNoInlineHandlersOrHTMLInjection(t *testing.T) {
	fsys := FS()
	names, err := fs.Glob(fsys, "*.*")
	if err != nil {
		t.Fatal(err)
	}
	inline := regexp.MustCompile(`\son[a-z]+\s*=\s*"`)
	sinks := regexp.MustCompile(`innerHTML|outerHTML|insertAdjacentHTML|document\.write`)
	for _, name := range names {
		src, err := fs.ReadFile(fsys, name)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case strings.HasSuffix(name, ".html"):
			if m := inline.Find(src); m != nil {
				t.Errorf("%s has an inline event handler: %s", name, m)
			}
		case strings.HasSuffix(name, ".js"):
			if m := sinks.Find(src); m != nil {
				t.Errorf("%s uses an HTML sink: %s", name, m)
			}
		}
	}
}

// TestNoTestToolsServed checks that the accessibility checker the browser
// test injects (axe-core) is not part of what dshd serves.
func TestNoTestToolsServed(t *testing.T) {
	err := fs.WalkDir(FS(), ".", func(name string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		src, err := fs.ReadFile(FS(), name)
		if err != nil {
			return err
		}
		if strings.Contains(strings.ToLower(name), "axe") || strings.Contains(string(src), "axe-core") {
			t.Errorf("the UI serves %s, which holds axe-core", name)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
