package shellenv

import (
	"errors"
	"strings"
	"testing"
)

func TestResolveHome(t *testing.T) {
	const user, cwd = "/home/u", "/work/dir"
	tests := []struct {
		name     string
		in       HomeInput
		want     string
		wantErr  error
		wantText []string // substrings of the error
	}{
		{name: "default", in: HomeInput{}, want: "/home/u/.dsh"},
		{name: "flag", in: HomeInput{Flag: "/srv/a"}, want: "/srv/a"},
		{name: "config", in: HomeInput{Config: "/srv/c"}, want: "/srv/c"},
		{name: "ambient", in: HomeInput{Ambient: "/srv/env"}, want: "/srv/env"},
		{name: "flag beats config", in: HomeInput{Flag: "/srv/a", Config: "/srv/c"}, want: "/srv/a"},
		{name: "flag beats ambient", in: HomeInput{Flag: "/srv/a", Ambient: "/srv/env"}, want: "/srv/a"},
		{name: "config beats ambient", in: HomeInput{Config: "/srv/c", Ambient: "/srv/env"}, want: "/srv/c"},
		{name: "blank ambient", in: HomeInput{Ambient: ""}, want: "/home/u/.dsh"},
		{name: "whitespace ambient", in: HomeInput{Ambient: " \t\n"}, want: "/home/u/.dsh"},
		{name: "whitespace flag is not given", in: HomeInput{Flag: "  ", Config: "/srv/c"}, want: "/srv/c"},
		{name: "tilde alone", in: HomeInput{Flag: "~"}, want: "/home/u"},
		{name: "tilde slash", in: HomeInput{Config: "~/dsh"}, want: "/home/u/dsh"},
		{name: "tilde in ambient", in: HomeInput{Ambient: "~/.x"}, want: "/home/u/.x"},
		{name: "tilde user is not expanded", in: HomeInput{Flag: "~bob/x"}, want: "/work/dir/~bob/x"},
		{name: "relative", in: HomeInput{Flag: "rel/dsh"}, want: "/work/dir/rel/dsh"},
		{name: "dot relative", in: HomeInput{Config: "./a/../b"}, want: "/work/dir/b"},
		{name: "cleaned", in: HomeInput{Flag: "/srv//a/./b/"}, want: "/srv/a/b"},
		{name: "skills local alone", in: HomeInput{SkillsLocal: "/srv/s"}, want: "/srv/s"},
		{name: "skills local beats ambient", in: HomeInput{SkillsLocal: "/srv/s", Ambient: "/srv/env"}, want: "/srv/s"},
		{name: "skills local agrees with flag", in: HomeInput{Flag: "/srv/a/", SkillsLocal: "/srv/x/../a"}, want: "/srv/a"},
		{name: "skills local agrees after tilde", in: HomeInput{Config: "~/d", SkillsLocal: "/home/u/d"}, want: "/home/u/d"},
		{
			name:     "flag conflicts with skills local",
			in:       HomeInput{Flag: "/srv/a", SkillsLocal: "/srv/b"},
			wantErr:  ErrHomeConflict,
			wantText: []string{"--home", "skills.local.dshHome", `"/srv/a"`, `"/srv/b"`},
		},
		{
			name:     "config conflicts with skills local",
			in:       HomeInput{Config: "~/c", SkillsLocal: "rel"},
			wantErr:  ErrHomeConflict,
			wantText: []string{"dshHome", "skills.local.dshHome", `"/home/u/c"`, `"/work/dir/rel"`},
		},
		{name: "tilde without user home", in: HomeInput{Flag: "~/x", UserHome: "-"}, wantErr: ErrInvalidHome},
		{name: "default without user home", in: HomeInput{UserHome: "-"}, wantErr: ErrInvalidHome},
		{name: "relative without cwd", in: HomeInput{Flag: "x", Cwd: "-"}, wantErr: ErrInvalidHome},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := tt.in
			switch in.UserHome {
			case "":
				in.UserHome = user
			case "-":
				in.UserHome = ""
			}
			switch in.Cwd {
			case "":
				in.Cwd = cwd
			case "-":
				in.Cwd = ""
			}
			got, err := ResolveHome(in)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("ResolveHome() error = %v, want %v", err, tt.wantErr)
			}
			for _, s := range tt.wantText {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not name %s", err, s)
				}
			}
			if got != tt.want {
				t.Errorf("ResolveHome() = %q, want %q", got, tt.want)
			}
		})
	}
}
