package exec

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestBuildEnv(t *testing.T) {
	terminal := TerminalEnv()
	with := func(base []string, more ...string) []string {
		out := append([]string(nil), base...)
		out = append(out, terminal...)
		return append(out, more...)
	}
	server := []string{
		"PATH=/usr/bin",
		"HOME=/home/u",
		"EDITOR=vi",
		"DSH_STALE=leaked",
		"DSH_SESSION_ID=parent",
		"DSHD_TOKEN=server-secret",
		"OPENAI_API_KEY=sk",
		"db_password=pw",
		"MySecret=x",
		"GITHUB_TOKEN=gh",
		"LANG=C.UTF-8",
		"TERM=xterm-256color",
		"NOEQUALS",
		"=C:=weird",
	}
	tests := []struct {
		name     string
		policy   EnvPolicy
		environ  []string
		explicit map[string]string
		managed  []string
		want     []string
	}{
		{
			name:    "all scrubs managed and credentials, terminal overrides",
			environ: server,
			want:    []string{"PATH=/usr/bin", "HOME=/home/u", "EDITOR=vi", "LANG=C.UTF-8", "TERM=dumb", "NO_COLOR=1", "PAGER=cat", "GIT_PAGER=cat", "GIT_TERMINAL_PROMPT=0"},
		},
		{
			name:    "core keeps only core names",
			policy:  EnvPolicy{Inherit: InheritCore},
			environ: server,
			want:    with([]string{"PATH=/usr/bin", "HOME=/home/u", "LANG=C.UTF-8"}),
		},
		{
			name:    "none inherits nothing",
			policy:  EnvPolicy{Inherit: InheritNone},
			environ: server,
			want:    with(nil),
		},
		{
			name:    "ignore default excludes keeps credentials but never DSH_",
			policy:  EnvPolicy{IgnoreDefaultExcludes: true, Exclude: []string{"*_api_*"}},
			environ: server,
			want: []string{"PATH=/usr/bin", "HOME=/home/u", "EDITOR=vi", "DSHD_TOKEN=server-secret",
				"db_password=pw", "MySecret=x", "GITHUB_TOKEN=gh", "LANG=C.UTF-8", "TERM=dumb",
				"NO_COLOR=1", "PAGER=cat", "GIT_PAGER=cat", "GIT_TERMINAL_PROMPT=0"},
		},
		{
			name:    "extra exclude glob with ?",
			policy:  EnvPolicy{Inherit: InheritCore, Exclude: []string{"LAN?"}},
			environ: server,
			want:    with([]string{"PATH=/usr/bin", "HOME=/home/u"}),
		},
		{
			name:    "duplicates in environ: later wins in place",
			policy:  EnvPolicy{Inherit: InheritCore},
			environ: []string{"PATH=/a", "HOME=/h", "PATH=/b"},
			want:    with([]string{"PATH=/b", "HOME=/h"}),
		},
		{
			name:    "set overrides terminal and inherited, drops DSH_",
			policy:  EnvPolicy{Inherit: InheritCore, Set: map[string]string{"PAGER": "less", "FOO": "1", "DSH_X": "no", "PATH": "/set"}},
			environ: server,
			want: []string{"PATH=/set", "HOME=/home/u", "LANG=C.UTF-8", "NO_COLOR=1", "TERM=dumb",
				"PAGER=less", "GIT_PAGER=cat", "GIT_TERMINAL_PROMPT=0", "FOO=1"},
		},
		{
			name:     "explicit overrides set, DSH_ and malformed dropped, new names sorted",
			policy:   EnvPolicy{Inherit: InheritNone, Set: map[string]string{"FOO": "set"}},
			explicit: map[string]string{"FOO": "explicit", "ZED": "z", "ALPHA": "a", "DSH_SESSION_ID": "forged", "A=B": "x", "": "e"},
			want:     with(nil, "FOO=explicit", "ALPHA=a", "ZED=z"),
		},
		{
			name:     "managed last wins over everything",
			policy:   EnvPolicy{Inherit: InheritNone},
			explicit: map[string]string{"X": "explicit"},
			managed:  []string{"DSH_HOME=/h", "DSH_SHELL=1", "X=managed", "TERM=managed", "DSH_SHELL=2", "broken"},
			want: []string{"NO_COLOR=1", "TERM=managed", "PAGER=cat", "GIT_PAGER=cat", "GIT_TERMINAL_PROMPT=0",
				"X=managed", "DSH_HOME=/h", "DSH_SHELL=2"},
		},
		{
			name:    "managed session id replaces ambient",
			environ: []string{"DSH_SESSION_ID=parent", "DSH_HOME=/old"},
			managed: []string{"DSH_HOME=/new", "DSH_SESSION_ID=child"},
			want:    with(nil, "DSH_HOME=/new", "DSH_SESSION_ID=child"),
		},
		{
			name: "a secret value is dropped whatever its name, at every step",
			policy: EnvPolicy{IgnoreDefaultExcludes: true, Secrets: []string{"tok-123", ""},
				Set: map[string]string{"CONF_AUTH": "tok-123", "CONF_OK": "fine"}},
			environ:  []string{"BEARER=tok-123", "PADDED= tok-123\n", "EMPTY=", "NEAR=tok-1234"},
			explicit: map[string]string{"REQ_AUTH": "tok-123", "REQ_OK": "ok"},
			managed:  []string{"DSH_X=tok-123", "DSH_Y=y"},
			want:     with([]string{"EMPTY=", "NEAR=tok-1234"}, "CONF_OK=fine", "REQ_OK=ok", "DSH_Y=y"),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := BuildEnv(tt.policy, tt.environ, tt.explicit, tt.managed)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("BuildEnv (-want +got):\n%s", diff)
			}
		})
	}
}

func TestBuildEnvManyManaged(t *testing.T) {
	// Past linearLimit the merger switches to a map; results must not change.
	var managed, want []string
	for i := range 100 {
		kv := "DSH_K" + string(rune('A'+i%26)) + string(rune('A'+i/26)) + "=v"
		managed = append(managed, kv)
		want = append(want, kv)
	}
	managed = append(managed, "DSH_KAA=last")
	want[0] = "DSH_KAA=last"
	got := BuildEnv(EnvPolicy{Inherit: InheritNone}, nil, nil, managed)
	if diff := cmp.Diff(append(TerminalEnv(), want...), got); diff != "" {
		t.Errorf("BuildEnv (-want +got):\n%s", diff)
	}
}

func TestGlobMatchFold(t *testing.T) {
	tests := []struct {
		pattern, name string
		want          bool
	}{
		{"*KEY*", "OPENAI_API_KEY", true},
		{"*KEY*", "key", true},
		{"*KEY*", "MONKEYS", true},
		{"*KEY*", "KE", false},
		{"*TOKEN*", "DSHD_TOKEN", true},
		{"A?C", "abc", true},
		{"A?C", "ac", false},
		{"*", "", true},
		{"FOO", "FOO", true},
		{"FOO", "FOOD", false},
		{"*_X", "A_B_X", true},
		{"*_X", "A_B_XY", false},
	}
	for _, tt := range tests {
		if got := globMatchFold(tt.pattern, tt.name); got != tt.want {
			t.Errorf("globMatchFold(%q, %q) = %v, want %v", tt.pattern, tt.name, got, tt.want)
		}
	}
}
