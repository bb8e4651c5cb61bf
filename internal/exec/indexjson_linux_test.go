package exec

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"
)

// TestIndexEntryJSON: the running index's lines, written without
// reflection, read back as the entries json.Marshal would have written,
// whatever the strings hold (quotes, controls, HTML, other scripts, bytes
// that are not UTF-8) and whatever the times.
func TestIndexEntryJSON(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 2, 6, 19, 55, 954928005, time.UTC)
	for _, ent := range []indexEntry{
		{ID: "job_1", Command: "true", Cwd: "/tmp", CreatedAt: at, StartedAt: at, PID: 42, LeaderStart: 1234567},
		{ID: "job_2", AgentID: "agt_1", Command: "echo \"a\"\n\tb <c> & 'd' \\ \u2028 \u00e9 \U0001F600 \x01", Cwd: "/home/ü",
			Background: true, CreatedAt: at.In(time.FixedZone("x", 3600)), StartedAt: at.Add(time.Second), PID: 1, Cgroup: "/sys/fs/cgroup/dshd-1/job_2"},
		{ID: "job_3", Command: "printf '\xff\xfe'", Cwd: "/tmp/\xc3", CreatedAt: at, StartedAt: at},
		{ID: "job_4", Command: "x", Cwd: "/", CreatedAt: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)},
		{ID: "job_5"},
	} {
		want, wantErr := json.Marshal(ent)
		got, err := ent.appendJSON([]byte("prefix"))
		if (err != nil) != (wantErr != nil) {
			t.Errorf("%s: appendJSON error %v, json.Marshal %v", ent.ID, err, wantErr)
			continue
		}
		if err != nil {
			continue
		}
		if string(got[:6]) != "prefix" {
			t.Fatalf("%s: appendJSON lost what it appended to: %q", ent.ID, got)
		}
		var a, b indexEntry
		if err := json.Unmarshal(got[6:], &a); err != nil {
			t.Fatalf("%s: appendJSON wrote %q: %v", ent.ID, got[6:], err)
		}
		if err := json.Unmarshal(want, &b); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(a, b) || !a.CreatedAt.Equal(ent.CreatedAt) {
			t.Errorf("%s: appendJSON reads back as %+v, json.Marshal as %+v", ent.ID, a, b)
		}
	}
}
