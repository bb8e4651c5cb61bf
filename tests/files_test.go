package tests

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dshd/dshd/internal/testenv"
)

// fileReq sends a raw request to a file route and returns the status, the
// problem code (for a problem answer) and the body.
func (s *testServer) fileReq(t testing.TB, method, path string, body []byte, headers ...string) (int, string, []byte) {
	t.Helper()
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	req, err := http.NewRequest(method, s.URL+path, r)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+s.Token)
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var code string
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "application/problem+json") {
		var p struct{ Code string }
		_ = json.Unmarshal(b, &p)
		code = p.Code
	}
	return resp.StatusCode, code, b
}

// wantFile sends a request and checks its status and problem code.
func (s *testServer) wantFile(t testing.TB, method, path string, body []byte, status int, code string) []byte {
	t.Helper()
	st, c, b := s.fileReq(t, method, path, body)
	if st != status || c != code {
		t.Errorf("%s %s = %d %q, want %d %q: %s", method, path, st, c, status, code, b)
	}
	return b
}

// filesDir is a directory outside /tmp (a sandbox's /tmp is its own).
func filesDir(t testing.TB, name string) string {
	t.Helper()
	d, err := os.MkdirTemp("/var/tmp", "dshd-files-"+name+"-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

// TestFilesRoutes drives every file route as a shared agent and as a
// snapshot fork of it, under each mechanism: what they write is what the
// agent's bash reads (in its view: the shared directory never sees the
// fork's writes), and each refusal answers its code with nothing written.
func TestFilesRoutes(t *testing.T) {
	t.Parallel()
	testenv.NeedRoot(t, "snapshot views and both mechanisms need root")
	for _, mech := range sandboxMechanisms {
		t.Run(mech, func(t *testing.T) { testFilesRoutes(t, mech) })
	}
}

func testFilesRoutes(t *testing.T, mech string) {
	s := startSandboxServer(t, mech)
	outside := filesDir(t, "outside")
	if err := os.WriteFile(filepath.Join(outside, "secret"), []byte("outside\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tokenFile := tokenFileOf(t, s)
	// newWS is a workspace with a .git, and the links a model's bash
	// would plant: one to a directory outside, one to the token.
	newWS := func(name string) string {
		ws := filesDir(t, name)
		if err := os.MkdirAll(filepath.Join(ws, ".git"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(ws, ".git", "config"), []byte("[core]\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(outside, filepath.Join(ws, "out")); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(tokenFile, filepath.Join(ws, "tok")); err != nil {
			t.Fatal(err)
		}
		return ws
	}
	ww := map[string]any{"policy": "workspace-write", "network": "off"}
	type agentCase struct{ name, id, ws, other string }
	wsShared := newWS("shared")
	agents := []agentCase{{name: "shared", id: s.newAgent(t, "/agents", map[string]any{"cwd": wsShared, "sandbox": ww}).ID, ws: wsShared}}
	var h struct {
		Details struct {
			Workspaces *struct{ Snapshot bool } `json:"workspaces"`
		} `json:"details"`
	}
	if s.DoJSON(t, "GET", "/healthz", nil, &h); h.Details.Workspaces != nil && h.Details.Workspaces.Snapshot {
		wsSnap := newWS("snap")
		parent := s.newAgent(t, "/agents", map[string]any{"cwd": wsSnap, "sandbox": ww})
		fork := s.newAgent(t, "/agents/"+parent.ID+"/fork", map[string]any{"workspace": "snapshot", "sandbox": ww})
		agents = append(agents, agentCase{name: "snapshot", id: fork.ID, ws: wsSnap, other: parent.ID})
	} else {
		testenv.Need(t, "snapshot workspaces")
	}

	for _, a := range agents {
		t.Run(a.name, func(t *testing.T) {
			f := "/agents/" + a.id + "/files/"
			body := []byte("hello from the harness\n")
			s.wantFile(t, "PUT", f+"up/dir/a.txt", body, 404, "path_not_found")
			s.wantFile(t, "PUT", f+"up/dir/a.txt?parents=true&mode=0750", body, 200, "")
			if got := s.run(t, a.id, "cat up/dir/a.txt; stat -c %a up/dir/a.txt"); got != string(body)+"750\n" {
				t.Errorf("the agent's bash reads %q", got)
			}
			if a.name == "snapshot" {
				// In the fork's view only: its parent does not see it.
				if got := s.run(t, a.other, "test -e up/dir/a.txt && echo seen || echo unseen"); got != "unseen\n" {
					t.Errorf("the fork's upload: its parent's bash says %q", got)
				}
			} else if _, err := os.Stat(filepath.Join(a.ws, "up/dir/a.txt")); err != nil {
				t.Errorf("the shared agent's upload is not in its directory: %v", err)
			}
			if got := s.wantFile(t, "GET", f+"up/dir/a.txt", nil, 200, ""); !bytes.Equal(got, body) {
				t.Errorf("GET = %q", got)
			}
			st, _, got := s.fileReq(t, "GET", f+"up/dir/a.txt", nil, "Range", "bytes=6-9")
			if st != 206 || string(got) != "from" {
				t.Errorf("range = %d %q", st, got)
			}
			// Replace keeps the mode; the bash sees the new bytes.
			s.wantFile(t, "PUT", f+"up/dir/a.txt", []byte("v2"), 200, "")
			if got := s.run(t, a.id, "cat up/dir/a.txt; stat -c %a up/dir/a.txt"); got != "v2750\n" {
				t.Errorf("after replace the bash reads %q", got)
			}
			var list struct {
				Entries []struct{ Path, Type, Mode, Link string }
			}
			if err := json.Unmarshal(s.wantFile(t, "GET", f+"?depth=3", nil, 200, ""), &list); err != nil {
				t.Fatal(err)
			}
			seen := map[string]string{}
			for _, e := range list.Entries {
				seen[e.Path] = e.Type + " " + e.Mode + " " + e.Link
			}
			for p, want := range map[string]string{"up/dir/a.txt": "file 0750 ", "out": "symlink 0777 " + outside, "up": "directory 0755 "} {
				if seen[p] != want {
					t.Errorf("listing %s = %q, want %q (all: %v)", p, seen[p], want, seen)
				}
			}
			s.wantFile(t, "POST", f+"made?op=mkdir", nil, 201, "")
			s.wantFile(t, "POST", f+"made?op=mkdir", nil, 409, "path_exists")
			s.wantFile(t, "POST", f+"made?op=mkdir&parents=true", nil, 201, "")
			s.wantFile(t, "DELETE", f+"up", nil, 409, "directory_not_empty")
			s.wantFile(t, "DELETE", f+"up?recursive=true", nil, 204, "")
			s.wantFile(t, "GET", f+"up/dir/a.txt", nil, 404, "path_not_found")

			// Refusals, each with its code, nothing written.
			s.wantFile(t, "PUT", f+outside+"/new", body, 403, "path_not_writable")
			s.wantFile(t, "PUT", f+"/etc/dshd-files-test", body, 403, "path_not_writable")
			s.wantFile(t, "PUT", f+".git/config", body, 403, "path_protected")
			s.wantFile(t, "PUT", f+".git/hooks/pre-commit?parents=true", body, 403, "path_protected")
			s.wantFile(t, "DELETE", f+".git?recursive=true", nil, 403, "path_protected")
			s.wantFile(t, "PUT", f+"out/new", body, 403, "path_through_link")
			s.wantFile(t, "PUT", f+"out/sub/new?parents=true", body, 403, "path_through_link")
			s.wantFile(t, "PUT", f+s.Home+"/planted", body, 403, "path_hidden")
			s.wantFile(t, "PUT", f+"../x", body, 422, "invalid_path")
			s.wantFile(t, "PUT", f+"made", body, 409, "is_a_directory")
			s.wantFile(t, "PUT", f+"made/f", body, 200, "")
			s.wantFile(t, "PUT", f+"made/f/g", body, 409, "not_a_directory")
			for _, p := range []string{outside + "/new", "/etc/dshd-files-test", outside + "/sub/new", filepath.Join(s.Home, "planted")} {
				if _, err := os.Lstat(p); err == nil {
					t.Errorf("%s was written", p)
				}
			}
			if got := s.run(t, a.id, "cat .git/config"); got != "[core]\n" {
				t.Errorf("the agent's .git/config = %q", got)
			}
			if b, _ := os.ReadFile(filepath.Join(a.ws, ".git", "config")); string(b) != "[core]\n" {
				t.Errorf(".git/config = %q", b)
			}
			// Reads of the home and the token, also through a link.
			s.wantFile(t, "GET", f+tokenFile, nil, 403, "path_hidden")
			s.wantFile(t, "GET", f+s.Home, nil, 403, "path_hidden")
			s.wantFile(t, "GET", "/agents/"+a.id+"/archive/"+s.Home, nil, 403, "path_hidden")
			if a.name == "shared" {
				s.wantFile(t, "GET", f+"tok", nil, 403, "path_hidden")
				// A read outside the cwd is allowed (the sandbox reads there too).
				if got := s.wantFile(t, "GET", f+"out/secret", nil, 200, ""); string(got) != "outside\n" {
					t.Errorf("read through a link = %q", got)
				}
			} else {
				// In a view, no link leads a read out of it.
				s.wantFile(t, "GET", f+"tok", nil, 403, "path_through_link")
				s.wantFile(t, "GET", f+"out/secret", nil, 403, "path_through_link")
			}
			s.wantFile(t, "GET", f+"missing", nil, 404, "path_not_found")
			s.wantFile(t, "GET", f+"/dev/null", nil, 422, "not_a_regular_file")
			s.wantFile(t, "GET", f+"x?depth=99", nil, 400, "bad_request")
		})
	}

	// A read-only agent reads, and writes nothing.
	ws := filesDir(t, "ro")
	if err := os.MkdirAll(filepath.Join(ws, "made"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ws, "made", "f"), []byte("ro"), 0o644); err != nil {
		t.Fatal(err)
	}
	ro := s.newAgent(t, "/agents", map[string]any{"cwd": ws, "sandbox": map[string]any{"policy": "read-only", "network": "off"}})
	f := "/agents/" + ro.ID + "/files/"
	s.wantFile(t, "GET", f+"made/f", nil, 200, "")
	s.wantFile(t, "PUT", f+"ro.txt", []byte("x"), 403, "path_not_writable")
	s.wantFile(t, "DELETE", f+"made/f", nil, 403, "path_not_writable")
	s.wantFile(t, "POST", f+"ro?op=mkdir", nil, 403, "path_not_writable")
	s.wantFile(t, "PUT", "/agents/"+ro.ID+"/archive/ro", tarOf(t, []tarEntry{{name: "a", body: "x", mode: 0o644}}), 403, "path_not_writable")
	if _, err := os.Lstat(filepath.Join(ws, "ro.txt")); err == nil {
		t.Error("the read-only agent wrote ro.txt")
	}
	s.wantFile(t, "GET", "/agents/agt_nosuch/files/x", nil, 404, "agent_not_found")
}

// tokenFileOf is the server's token file.
func tokenFileOf(t testing.TB, s *testServer) string {
	t.Helper()
	for _, name := range []string{"server.token"} {
		if _, err := os.Stat(filepath.Join(s.Home, name)); err == nil {
			return filepath.Join(s.Home, name)
		}
	}
	t.Fatalf("no token file in %s", s.Home)
	return ""
}

// TestFilesUploadLimit: a body over files.maxUploadBytes is 413, nothing
// written, whether it says its length or not.
func TestFilesUploadLimit(t *testing.T) {
	t.Parallel()
	s := startServer(t, withConfig("files:\n  maxUploadBytes: 1024\n"))
	ws := filesDir(t, "limit")
	a := s.newAgent(t, "/agents", map[string]any{"cwd": ws})
	f := "/agents/" + a.ID + "/files/"
	s.wantFile(t, "PUT", f+"ok", bytes.Repeat([]byte("x"), 1024), 200, "")
	s.wantFile(t, "PUT", f+"big", bytes.Repeat([]byte("x"), 1025), 413, "body_too_large")
	// Chunked: no Content-Length, the bound found while reading.
	req, _ := http.NewRequest("PUT", s.URL+f+"big", io.MultiReader(bytes.NewReader(bytes.Repeat([]byte("x"), 4096))))
	req.Header.Set("Authorization", "Bearer "+s.Token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 413 {
		t.Errorf("chunked over the limit = %d", resp.StatusCode)
	}
	ents, _ := os.ReadDir(ws)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if strings.Join(names, ",") != "ok" {
		t.Errorf("the workspace holds %v, want only ok (no temporary file left)", names)
	}
}

type tarEntry struct {
	name, body, link string
	mode             int64
	typ              byte
}

func tarOf(t testing.TB, ents []tarEntry) []byte {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, e := range ents {
		h := &tar.Header{Name: e.name, Mode: e.mode, Size: int64(len(e.body)), Linkname: e.link, Typeflag: e.typ, ModTime: time.Unix(1700000000, 0)}
		if h.Typeflag == 0 {
			h.Typeflag = tar.TypeReg
		}
		if h.Typeflag != tar.TypeReg {
			h.Size = 0
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			io.WriteString(tw, e.body)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// makeFileTree writes n files in nested directories, with varied modes, and a
// symbolic link for every 100 files, under dir.
func makeFileTree(t testing.TB, dir string, n int) {
	t.Helper()
	for i := range n {
		d := filepath.Join(dir, fmt.Sprintf("d%02d", i%50), fmt.Sprintf("e%d", i%7))
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		mode := []fs.FileMode{0o644, 0o600, 0o755, 0o640}[i%4]
		if err := os.WriteFile(filepath.Join(d, fmt.Sprintf("f%05d", i)), []byte(strings.Repeat(fmt.Sprintf("file %d\n", i), i%13)), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(filepath.Join(d, fmt.Sprintf("f%05d", i)), mode); err != nil {
			t.Fatal(err)
		}
		if i%100 == 0 {
			if err := os.Symlink(fmt.Sprintf("f%05d", i), filepath.Join(d, fmt.Sprintf("l%05d", i))); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := os.Symlink("d00/e0", filepath.Join(dir, "top-link")); err != nil {
		t.Fatal(err)
	}
}

// tarTree tars dir the way a harness would (names relative to it).
func tarTree(t testing.TB, dir string) []byte {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		link := ""
		if fi.Mode()&fs.ModeSymlink != 0 {
			link, _ = os.Readlink(p)
		}
		h, err := tar.FileInfoHeader(fi, link)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		h.Name = rel
		if fi.IsDir() {
			h.Name += "/"
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if fi.Mode().IsRegular() {
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			_, err = tw.Write(data)
			return err
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// tarIndex is what a tar stream holds: name → type, mode, link, digest.
func tarIndex(t testing.TB, data []byte) map[string]string {
	t.Helper()
	out := map[string]string{}
	tr := tar.NewReader(bytes.NewReader(data))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.New()
		if _, err := io.Copy(sum, tr); err != nil {
			t.Fatal(err)
		}
		out[strings.TrimSuffix(h.Name, "/")] = fmt.Sprintf("%c %o %s %x", h.Typeflag, h.Mode&0o7777, h.Linkname, sum.Sum(nil))
	}
}

// TestFilesArchiveRoundTrip: a tar of a 10,000-file tree (modes, nested
// directories, symbolic links) goes in and comes out byte for byte, as a
// shared agent and as a snapshot fork, and the agent's bash sees it.
func TestFilesArchiveRoundTrip(t *testing.T) {
	t.Parallel()
	src := filesDir(t, "src")
	makeFileTree(t, src, 10000)
	in := tarTree(t, src)
	want := tarIndex(t, in)
	if len(want) < 10000 {
		t.Fatalf("the source tar holds %d entries", len(want))
	}
	s := startServer(t)
	ws := filesDir(t, "ws")
	shared := s.newAgent(t, "/agents", map[string]any{"cwd": ws, "sandbox": map[string]any{"policy": "workspace-write"}})
	ids := map[string]string{"shared": shared.ID}
	if os.Geteuid() == 0 {
		var h struct {
			Details struct {
				Workspaces *struct{ Snapshot bool } `json:"workspaces"`
			} `json:"details"`
		}
		if s.DoJSON(t, "GET", "/healthz", nil, &h); h.Details.Workspaces != nil && h.Details.Workspaces.Snapshot {
			ids["snapshot"] = s.newAgent(t, "/agents/"+shared.ID+"/fork", map[string]any{"workspace": "snapshot"}).ID
		}
	}
	for name, id := range ids {
		t.Run(name, func(t *testing.T) {
			var res struct{ Entries int }
			if err := json.Unmarshal(s.wantFile(t, "PUT", "/agents/"+id+"/archive/tree-"+name+"?parents=true", in, 200, ""), &res); err != nil {
				t.Fatal(err)
			}
			if res.Entries != len(want) {
				t.Errorf("unpacked %d entries, want %d", res.Entries, len(want))
			}
			out := s.wantFile(t, "GET", "/agents/"+id+"/archive/tree-"+name, nil, 200, "")
			got := tarIndex(t, out)
			n := 0
			for k, w := range want {
				if got[k] != w {
					if n++; n <= 5 {
						t.Errorf("%s: out %q, in %q", k, got[k], w)
					}
				}
			}
			if len(got) != len(want) {
				t.Errorf("out %d entries, in %d", len(got), len(want))
			}
			if c := s.run(t, id, "find tree-"+name+" -type f | wc -l; readlink tree-"+name+"/top-link"); c != "10000\nd00/e0\n" {
				t.Errorf("the agent's bash finds %q", c)
			}
		})
	}
}

// TestFilesArchiveRefusals: an archive entry that would write outside,
// through a link, into .git, or a device, is refused with its code; a
// refused archive writes nothing.
func TestFilesArchiveRefusals(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	ws := filesDir(t, "ws")
	a := s.newAgent(t, "/agents", map[string]any{"cwd": ws, "sandbox": map[string]any{"policy": "workspace-write"}})
	arch := "/agents/" + a.ID + "/archive/"
	ok := tarEntry{name: "first", body: "1", mode: 0o644}
	for _, c := range []struct {
		name   string
		ents   []tarEntry
		status int
		code   string
	}{
		{"dotdot", []tarEntry{ok, {name: "../escape", body: "x", mode: 0o644}}, 422, "invalid_archive"},
		{"nested dotdot", []tarEntry{ok, {name: "a/../../escape", body: "x", mode: 0o644}}, 422, "invalid_archive"},
		{"absolute", []tarEntry{ok, {name: "/etc/dshd-escape", body: "x", mode: 0o644}}, 422, "invalid_archive"},
		{"absolute link", []tarEntry{ok, {name: "l", link: "/etc", typ: tar.TypeSymlink}}, 422, "invalid_archive"},
		{"link leading out", []tarEntry{ok, {name: "a/l", link: "../../x", typ: tar.TypeSymlink}}, 422, "invalid_archive"},
		{"hard link out", []tarEntry{ok, {name: "h", link: "../x", typ: tar.TypeLink}}, 422, "invalid_archive"},
		{"device", []tarEntry{ok, {name: "dev", typ: tar.TypeChar}}, 422, "invalid_archive"},
		{"fifo", []tarEntry{ok, {name: "fifo", typ: tar.TypeFifo}}, 422, "invalid_archive"},
		{"git", []tarEntry{ok, {name: "sub/.git/hooks/post-checkout", body: "x", mode: 0o755}}, 403, "path_protected"},
		{"garbage", nil, 422, "invalid_archive"},
	} {
		t.Run(c.name, func(t *testing.T) {
			body := []byte("this is not a tar stream, not at all; it is long enough to be one block of 512 bytes? no.")
			if c.ents != nil {
				body = tarOf(t, c.ents)
			}
			dir := strings.ReplaceAll(c.name, " ", "-")
			s.wantFile(t, "PUT", arch+dir+"?parents=true", body, c.status, c.code)
			if _, err := os.Lstat(filepath.Join(ws, dir)); err == nil {
				t.Errorf("a refused archive wrote %s", dir)
			}
		})
	}
	// A link the archive makes (inside) is never written through.
	s.wantFile(t, "PUT", arch+"through?parents=true", tarOf(t, []tarEntry{
		{name: "d/", typ: tar.TypeDir, mode: 0o755}, {name: "l", link: "d", typ: tar.TypeSymlink}, {name: "l/x", body: "x", mode: 0o644},
	}), 403, "path_through_link")
	if _, err := os.Lstat(filepath.Join(ws, "through/d/x")); err == nil {
		t.Error("an entry was written through the archive's link")
	}
	if _, err := os.Lstat(filepath.Join("/etc", "dshd-escape")); err == nil {
		t.Error("/etc/dshd-escape written")
	}
}
