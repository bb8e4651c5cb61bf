package tests

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestClusterFileUpload: uploads far over http.maxBodyBytes (1 MiB) reach
// an agent's home through the other replicas, streamed (the forwarder
// holds no body to sign it: a trailer proves it), byte for byte: an 8 MiB
// file and a tar of a 3 MiB file; downloads and a listing come back
// through them too, and a watch opened through one sees the upload.
func TestClusterFileUpload(t *testing.T) {
	t.Parallel()
	_, rs := startCluster(t)
	waitForReplicas(t, rs)
	ws := filesDir(t, "cluster")
	var a agent
	if st := rs[0].DoJSON(t, "POST", "/agents", map[string]any{"cwd": ws}, &a); st != 201 || !strings.HasPrefix(a.ID, "agt_replica-0_") {
		t.Fatalf("create agent: %d %q", st, a.ID)
	}
	f := "/agents/" + a.ID + "/files/"
	w := rs[2].watch(t, f+"?watch=true&recursive=true", "")
	if w.status != 200 {
		t.Fatalf("a watch through replica 2 = %d %s", w.status, w.body)
	}
	big := make([]byte, 8<<20)
	if _, err := rand.Read(big); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(big)
	for i := 1; i <= 2; i++ {
		name := "big" + string(rune('0'+i)) + ".bin"
		var res struct{ Size int64 }
		b := rs[i].wantFile(t, "PUT", f+"up/"+name+"?parents=true", big, 200, "")
		if err := json.Unmarshal(b, &res); err != nil || res.Size != int64(len(big)) {
			t.Fatalf("upload through replica %d: %s", i, b)
		}
		got, err := os.ReadFile(filepath.Join(ws, "up", name))
		if err != nil || sha256.Sum256(got) != sum {
			t.Fatalf("the file uploaded through replica %d is not the bytes sent (%d bytes, %v)", i, len(got), err)
		}
		w.until(t, "modified up/"+name)
		// The agent's bash, at its home, reads the same bytes.
		r := rs[i].callTool(t, a.ID, "bash", map[string]any{"command": "sha256sum up/" + name})
		if !strings.HasPrefix(r.Text, hex.EncodeToString(sum[:])) {
			t.Errorf("the home's bash: %q", r.Text)
		}
		if down := rs[i].wantFile(t, "GET", f+"up/"+name, nil, 200, ""); !bytes.Equal(down, big) {
			t.Errorf("download through replica %d: %d bytes, not the file", i, len(down))
		}
	}
	part := big[:3<<20]
	tarball := tarOf(t, []tarEntry{{name: "pkg/part.bin", body: string(part), mode: 0o600}})
	rs[1].wantFile(t, "PUT", "/agents/"+a.ID+"/archive/unpacked?parents=true", tarball, 200, "")
	if got, err := os.ReadFile(filepath.Join(ws, "unpacked/pkg/part.bin")); err != nil || !bytes.Equal(got, part) {
		t.Errorf("the archive unpacked through replica 1: %d bytes, %v", len(got), err)
	}
	var list struct{ Entries []struct{ Path string } }
	if err := json.Unmarshal(rs[2].wantFile(t, "GET", f+"up", nil, 200, ""), &list); err != nil || len(list.Entries) != 2 {
		t.Errorf("listing through replica 2: %+v %v", list, err)
	}
}
