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

func TestAgentOwner(t *testing.T) {
	for id, want := range map[string]string{
		AgentIDPrefix("vm-a") + "01m8rk36x1nqbe98jk6bb615qc":  "vm-a",
		AgentIDPrefix("vm_b1") + "01m8rk36x1nqbe98jk6bb615qc": "vm_b1",
		"agt_01m8rk36x1nqbe98jk6bb615qc":                      "",
		"agt_x01m8rk36x1nqbe98jk6bb615qc":                     "",
		"job_vm-a_01m8rk36x1nqbe98jk6bb615qc":                 "",
		"":                                                    "",
	} {
		if got := AgentOwner(id); got != want {
			t.Errorf("AgentOwner(%q) = %q, want %q", id, got, want)
		}
	}
}

func TestMCPSessionOwner(t *testing.T) {
	for id, want := range map[string]string{
		MCPSessionPrefix("vm-a") + "W4MIQUXGN7FWOYA4QXCF55ZMRE": "vm-a",
		"W4MIQUXGN7FWOYA4QXCF55ZMRE":                            "",
		"mcp_W4MIQUXGN7FWOYA4QXCF55ZMRE":                        "",
		JobIDPrefix("vm-a") + "01m8rk36x1nqbe98jk6bb615qc":      "",
		"": "",
	} {
		if got := MCPSessionOwner(id); got != want {
			t.Errorf("MCPSessionOwner(%q) = %q, want %q", id, got, want)
		}
	}
}
