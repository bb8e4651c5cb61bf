package status

import "testing"

func TestJobOwner(t *testing.T) {
	for id, want := range map[string]string{
		JobIDPrefix("vm-a") + "01m8rk36x1nqbe98jk6bb615qc": "vm-a",
		"job_01m8rk36x1nqbe98jk6bb615qc":                   "",
		"agt_vm-a.01m8":                                    "",
		"job_":                                             "",
		"":                                                 "",
	} {
		if got := JobOwner(id); got != want {
			t.Errorf("JobOwner(%q) = %q, want %q", id, got, want)
		}
	}
}
