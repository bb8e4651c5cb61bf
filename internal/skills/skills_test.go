package skills

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestList(t *testing.T) {
	home := t.TempDir()
	write := func(dir, content string) string {
		t.Helper()
		p := filepath.Join(home, "skills", dir, "SKILL.md")
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	deploy := write("deploy", "---\nname: deploy\ndescription: Ship the service.\n---\n# Deploy\n")
	crlf := write("crlf", "---\r\nname: windows\r\ndescription: CRLF front matter.\r\n---\r\nbody\r\n")
	bare := write("bare", "# No front matter\n")
	broken := write("broken", "---\nname: [unclosed\n---\n")
	if err := os.MkdirAll(filepath.Join(home, "skills", "empty-dir"), 0o700); err != nil {
		t.Fatal(err)
	}

	got, err := New(home).List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := []Skill{
		{Name: "bare", Path: bare},
		{Name: "broken", Path: broken},
		{Name: "deploy", Description: "Ship the service.", Path: deploy},
		{Name: "windows", Description: "CRLF front matter.", Path: crlf},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("List (-want +got):\n%s", diff)
	}
}

func TestListMissingDir(t *testing.T) {
	got, err := New(t.TempDir()).List(context.Background())
	if err != nil || len(got) != 0 {
		t.Fatalf("List = %v, %v; want none, nil", got, err)
	}
}
