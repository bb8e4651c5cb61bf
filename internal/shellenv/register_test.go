package shellenv

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestRegisterRejects(t *testing.T) {
	key := func(k string) []KeySpec { return []KeySpec{{Key: k, Description: "d"}} }
	static := func(vals map[string]string) ResolverSpec { return ResolverSpec{Kind: KindStatic, Values: vals} }
	tmpl := func(k, v string) ResolverSpec {
		return ResolverSpec{Kind: KindTemplate, Values: map[string]string{k: v}}
	}
	hook := func(url string) ResolverSpec { return ResolverSpec{Kind: KindWebhook, URL: url} }

	tests := []struct {
		name         string
		spec         Spec
		wantErr      error
		wantProblems []string       // exact list, when set
		wantOwned    *KeyOwnedError // when set
	}{
		{
			name:         "blank name",
			spec:         Spec{Name: " ", Keys: key("DSH_X"), Resolver: static(nil)},
			wantErr:      ErrInvalidDeclaration,
			wantProblems: []string{"name is required"},
		},
		{
			name:    "upper-case name",
			spec:    Spec{Name: "Git", Keys: key("DSH_X"), Resolver: static(nil)},
			wantErr: ErrInvalidDeclaration,
		},
		{
			name:    "name with space",
			spec:    Spec{Name: "my tool", Keys: key("DSH_X"), Resolver: static(nil)},
			wantErr: ErrInvalidDeclaration,
		},
		{
			name:    "name too long",
			spec:    Spec{Name: strings.Repeat("a", 65), Keys: key("DSH_X"), Resolver: static(nil)},
			wantErr: ErrInvalidDeclaration,
		},
		{
			name:    "built-in name prefix",
			spec:    Spec{Name: "dsh.extra", Keys: key("DSH_X"), Resolver: static(nil)},
			wantErr: ErrInvalidDeclaration,
		},
		{
			name:    "duplicate name",
			spec:    staticSpec("existing", "DSH_OTHER", "v"),
			wantErr: ErrDuplicateContributor,
		},
		{
			name:    "duplicate built-in name",
			spec:    staticSpec("dsh.home", "DSH_OTHER", "v"),
			wantErr: ErrInvalidDeclaration,
		},
		{
			name:    "key outside namespace",
			spec:    Spec{Name: "c", Keys: key("PATH"), Resolver: static(nil)},
			wantErr: ErrInvalidDeclaration,
		},
		{
			name:    "lower-case key",
			spec:    Spec{Name: "c", Keys: key("DSH_x"), Resolver: static(nil)},
			wantErr: ErrInvalidDeclaration,
		},
		{
			name:    "key starting with digit",
			spec:    Spec{Name: "c", Keys: key("DSH_1"), Resolver: static(nil)},
			wantErr: ErrInvalidDeclaration,
		},
		{
			name:    "bare prefix",
			spec:    Spec{Name: "c", Keys: key("DSH_"), Resolver: static(nil)},
			wantErr: ErrInvalidDeclaration,
		},
		{
			name:         "reserved DSH_HOME",
			spec:         Spec{Name: "c", Keys: key(KeyHome), Resolver: static(nil)},
			wantErr:      ErrReservedKey,
			wantProblems: []string{"keys[0]: key DSH_HOME is reserved"},
		},
		{
			name:    "reserved DSH_SHELL",
			spec:    Spec{Name: "c", Keys: key(KeyShell), Resolver: static(nil)},
			wantErr: ErrReservedKey,
		},
		{
			name:    "reserved DSH_SESSION_ID",
			spec:    Spec{Name: "c", Keys: key(KeySessionID), Resolver: static(nil)},
			wantErr: ErrReservedKey,
		},
		{
			name:    "reserved DSH_SESSION_JSONL",
			spec:    Spec{Name: "c", Keys: key(KeySessionJSONL), Resolver: static(nil)},
			wantErr: ErrReservedKey,
		},
		{
			name:    "reserved key and another problem",
			spec:    Spec{Name: "c", Keys: []KeySpec{{Key: KeySessionJSONL, Description: "d"}, {Key: "DSH_X"}}, Resolver: static(nil)},
			wantErr: ErrInvalidDeclaration,
			wantProblems: []string{
				"keys[0]: key DSH_SESSION_JSONL is reserved",
				"keys[1]: description is required",
			},
		},
		{
			name:         "blank description",
			spec:         Spec{Name: "c", Keys: []KeySpec{{Key: "DSH_X", Description: "  "}}, Resolver: static(nil)},
			wantErr:      ErrInvalidDeclaration,
			wantProblems: []string{"keys[0]: description is required"},
		},
		{
			name:         "no keys",
			spec:         Spec{Name: "c", Resolver: static(nil)},
			wantErr:      ErrInvalidDeclaration,
			wantProblems: []string{"at least one key must be declared"},
		},
		{
			name:         "duplicate key in spec",
			spec:         Spec{Name: "c", Keys: []KeySpec{{"DSH_X", "a"}, {"DSH_X", "b"}}, Resolver: static(nil)},
			wantErr:      ErrInvalidDeclaration,
			wantProblems: []string{"keys[1]: key DSH_X is declared more than once"},
		},
		{
			name:      "key owned by another contributor",
			spec:      staticSpec("newcomer", "DSH_OWNED", "v", "DSH_ZZ", "w"),
			wantErr:   ErrKeyOwned,
			wantOwned: &KeyOwnedError{Key: "DSH_OWNED", Owner: "existing"},
		},
		{
			name:         "unknown resolver kind",
			spec:         Spec{Name: "c", Keys: key("DSH_X"), Resolver: ResolverSpec{Kind: "exec"}},
			wantErr:      ErrInvalidDeclaration,
			wantProblems: []string{`resolver: unknown kind "exec" (want static, template or webhook)`},
		},
		{
			name:    "missing resolver kind",
			spec:    Spec{Name: "c", Keys: key("DSH_X")},
			wantErr: ErrInvalidDeclaration,
		},
		{
			name:         "unknown placeholder",
			spec:         Spec{Name: "c", Keys: key("DSH_X"), Resolver: tmpl("DSH_X", "{agent.name}")},
			wantErr:      ErrInvalidDeclaration,
			wantProblems: []string{"resolver: template of DSH_X uses unknown placeholder {agent.name}"},
		},
		{
			name:    "unclosed placeholder",
			spec:    Spec{Name: "c", Keys: key("DSH_X"), Resolver: tmpl("DSH_X", "{agent.id")},
			wantErr: ErrInvalidDeclaration,
		},
		{
			name:         "static value for undeclared key",
			spec:         Spec{Name: "c", Keys: key("DSH_X"), Resolver: static(map[string]string{"DSH_Y": "v"})},
			wantErr:      ErrInvalidDeclaration,
			wantProblems: []string{`resolver: values name undeclared key "DSH_Y"`},
		},
		{
			name:    "template value for undeclared key",
			spec:    Spec{Name: "c", Keys: key("DSH_X"), Resolver: tmpl("DSH_Y", "{job.id}")},
			wantErr: ErrInvalidDeclaration,
		},
		{
			name:    "NUL in static value",
			spec:    Spec{Name: "c", Keys: key("DSH_X"), Resolver: static(map[string]string{"DSH_X": "a\x00b"})},
			wantErr: ErrInvalidDeclaration,
		},
		{
			name:         "webhook without url",
			spec:         Spec{Name: "c", Keys: key("DSH_X"), Resolver: hook("")},
			wantErr:      ErrInvalidDeclaration,
			wantProblems: []string{"resolver: url is required for webhook resolvers"},
		},
		{
			name:    "webhook with ftp url",
			spec:    Spec{Name: "c", Keys: key("DSH_X"), Resolver: hook("ftp://example.com/x")},
			wantErr: ErrInvalidDeclaration,
		},
		{
			name:    "webhook with relative url",
			spec:    Spec{Name: "c", Keys: key("DSH_X"), Resolver: hook("/hook")},
			wantErr: ErrInvalidDeclaration,
		},
		{
			name:    "webhook with values",
			spec:    Spec{Name: "c", Keys: key("DSH_X"), Resolver: ResolverSpec{Kind: KindWebhook, URL: "http://127.0.0.1/", Values: map[string]string{"DSH_X": "v"}}},
			wantErr: ErrInvalidDeclaration,
		},
		{
			name:    "webhook with negative timeout",
			spec:    Spec{Name: "c", Keys: key("DSH_X"), Resolver: ResolverSpec{Kind: KindWebhook, URL: "http://127.0.0.1/", Timeout: -time.Second}},
			wantErr: ErrInvalidDeclaration,
		},
		{
			name:    "static with url",
			spec:    Spec{Name: "c", Keys: key("DSH_X"), Resolver: ResolverSpec{Kind: KindStatic, URL: "http://127.0.0.1/"}},
			wantErr: ErrInvalidDeclaration,
		},
		{
			name:    "plugin not found",
			spec:    Spec{Name: "c", Plugin: "plg_missing", Keys: key("DSH_X"), Resolver: static(nil)},
			wantErr: ErrPluginNotFound,
		},
		{
			name: "every problem is listed",
			spec: Spec{
				Name: "Bad!",
				Keys: []KeySpec{{Key: "nope", Description: "d"}, {Key: KeyHome, Description: ""}, {Key: "DSH_OK", Description: "d"}},
				Resolver: ResolverSpec{Kind: KindTemplate, Values: map[string]string{
					"DSH_OK":    "{job.id} {bogus}",
					"DSH_OTHER": "x",
				}},
			},
			wantErr: ErrInvalidDeclaration,
			wantProblems: []string{
				`name "Bad!" is malformed: use 1 to 64 lowercase letters, digits, '.', '_' or '-', starting with a letter or digit`,
				`keys[0]: key "nope" does not match ^DSH_[A-Z][A-Z0-9_]*$`,
				"keys[1]: key DSH_HOME is reserved",
				"keys[1]: description is required",
				"resolver: template of DSH_OK uses unknown placeholder {bogus}",
				`resolver: values name undeclared key "DSH_OTHER"`,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, _ := mustNew(t, Options{StatePath: t.TempDir() + "/contributors.json"})
			mustRegister(t, r, staticSpec("existing", "DSH_OWNED", "o"))
			p, err := r.OpenPlugin(context.Background(), "scope", 0)
			if err != nil {
				t.Fatal(err)
			}
			mustRegister(t, r, Spec{Name: "scoped", Plugin: p.ID, Keys: []KeySpec{{"DSH_SCOPED", "d"}}, Resolver: ResolverSpec{Kind: KindStatic}})
			beforeC, beforeD, beforeP := r.Contributors(), r.Declarations(), r.Plugins()

			_, err = r.Register(context.Background(), tt.spec)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("Register() error = %v, want %v", err, tt.wantErr)
			}
			if tt.wantErr == ErrInvalidDeclaration && errors.Is(err, ErrReservedKey) ||
				tt.wantErr == ErrReservedKey && errors.Is(err, ErrInvalidDeclaration) {
				t.Errorf("error %v matches both ErrInvalidDeclaration and ErrReservedKey", err)
			}
			if tt.wantProblems != nil {
				var de *DeclarationError
				if !errors.As(err, &de) {
					t.Fatalf("error %v is not a *DeclarationError", err)
				}
				if diff := cmp.Diff(tt.wantProblems, de.Problems); diff != "" {
					t.Errorf("problems (-want +got):\n%s", diff)
				}
			}
			if tt.wantOwned != nil {
				var ko *KeyOwnedError
				if !errors.As(err, &ko) {
					t.Fatalf("error %v is not a *KeyOwnedError", err)
				}
				if diff := cmp.Diff(tt.wantOwned, ko); diff != "" {
					t.Errorf("KeyOwnedError (-want +got):\n%s", diff)
				}
				if !strings.Contains(err.Error(), `"existing"`) {
					t.Errorf("error %q does not name the owner", err)
				}
			}

			if diff := cmp.Diff(beforeC, r.Contributors()); diff != "" {
				t.Errorf("contributors changed (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(beforeD, r.Declarations()); diff != "" {
				t.Errorf("declarations changed (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(beforeP, r.Plugins()); diff != "" {
				t.Errorf("plugins changed (-want +got):\n%s", diff)
			}
		})
	}
}

func TestRegisterReturnsContributor(t *testing.T) {
	r, clock := mustNew(t, Options{})
	got := mustRegister(t, r, Spec{
		Name: "git",
		Keys: []KeySpec{{"DSH_GIT_Z", "last"}, {"DSH_GIT_A", "first"}},
		Resolver: ResolverSpec{Kind: KindTemplate, Values: map[string]string{
			"DSH_GIT_A": "{agent.id}",
		}},
	})
	want := Contributor{
		Name: "git", Kind: KindTemplate,
		Keys: []KeySpec{{"DSH_GIT_A", "first"}, {"DSH_GIT_Z", "last"}},
		Resolver: ResolverSpec{Kind: KindTemplate, Values: map[string]string{
			"DSH_GIT_A": "{agent.id}",
		}},
		CreatedAt: clock.Now(),
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Register() (-want +got):\n%s", diff)
	}
	// The caller's copy is independent of the registry.
	got.Resolver.Values["DSH_GIT_A"] = "mutated"
	got.Keys[0].Description = "mutated"
	again, err := r.Contributor("git")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, again); diff != "" {
		t.Errorf("Contributor() after mutating a copy (-want +got):\n%s", diff)
	}
}

func TestBuiltins(t *testing.T) {
	r, clock := mustNew(t, Options{})
	wantDecls := []Declaration{
		{Key: KeyHome, Description: "Absolute path of the dshd home directory.", Contributor: "dsh.home", Builtin: true, Kind: KindBuiltin},
		{Key: KeySessionID, Description: "Id of the agent session running the command; absent when the command runs for no agent.", Contributor: "dsh.session", Builtin: true, Kind: KindBuiltin},
		{Key: KeyShell, Description: "Always 1 inside a command run by dshd.", Contributor: "dsh.shell", Builtin: true, Kind: KindBuiltin},
	}
	if diff := cmp.Diff(wantDecls, r.Declarations()); diff != "" {
		t.Errorf("Declarations() (-want +got):\n%s", diff)
	}
	var names []string
	for _, c := range r.Contributors() {
		names = append(names, c.Name)
		if !c.Builtin || c.Kind != KindBuiltin || !c.CreatedAt.Equal(clock.Now()) {
			t.Errorf("built-in %+v: want Builtin, kind builtin, created now", c)
		}
		if err := r.Unregister(context.Background(), c.Name); !errors.Is(err, ErrBuiltinContributor) {
			t.Errorf("Unregister(%q) = %v, want ErrBuiltinContributor", c.Name, err)
		}
	}
	if diff := cmp.Diff([]string{"dsh.home", "dsh.session", "dsh.shell"}, names); diff != "" {
		t.Errorf("built-in names (-want +got):\n%s", diff)
	}
	if err := r.Unregister(context.Background(), "nobody"); !errors.Is(err, ErrContributorNotFound) {
		t.Errorf("Unregister(nobody) = %v, want ErrContributorNotFound", err)
	}
	if _, err := r.Contributor("nobody"); !errors.Is(err, ErrContributorNotFound) {
		t.Errorf("Contributor(nobody) = %v, want ErrContributorNotFound", err)
	}
}

func TestNewRejectsRelativeHome(t *testing.T) {
	if _, err := New(Options{Home: "rel"}); err == nil {
		t.Fatal("New with a relative home succeeded")
	}
}

func TestDeclarationsSorted(t *testing.T) {
	r, _ := mustNew(t, Options{})
	mustRegister(t, r, staticSpec("b", "DSH_B", "1", "DSH_Z", "2"))
	mustRegister(t, r, staticSpec("a", "DSH_A", "1", "DSH_M", "2"))
	var got []string
	for _, d := range r.Declarations() {
		got = append(got, d.Key+"@"+d.Contributor)
	}
	want := []string{"DSH_A@a", "DSH_B@b", "DSH_HOME@dsh.home", "DSH_M@a", "DSH_SESSION_ID@dsh.session", "DSH_SHELL@dsh.shell", "DSH_Z@b"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Declarations() keys (-want +got):\n%s", diff)
	}
}

// A declaration names its contributor's resolver kind and, where it helps a
// reader, how the value is made; a webhook URL never shows its credentials,
// query or fragment.
func TestDeclarationsDescribeResolver(t *testing.T) {
	r, _ := mustNew(t, Options{})
	mustRegister(t, r, staticSpec("s", "DSH_S", "static-value"))
	mustRegister(t, r, Spec{Name: "t", Keys: []KeySpec{{Key: "DSH_T", Description: "t"}},
		Resolver: ResolverSpec{Kind: KindTemplate, Values: map[string]string{"DSH_T": "agent-{agent.id}"}}})
	mustRegister(t, r, Spec{Name: "w", Keys: []KeySpec{{Key: "DSH_W", Description: "w"}},
		Resolver: ResolverSpec{Kind: KindWebhook, URL: "https://user:s3cret@127.0.0.1:9/env/hook?token=q-secret#frag-secret"}})
	got := map[string]Declaration{}
	for _, d := range r.Declarations() {
		got[d.Key] = d
	}
	for key, want := range map[string]Declaration{
		KeyHome: {Kind: KindBuiltin},
		"DSH_S": {Kind: KindStatic},
		"DSH_T": {Kind: KindTemplate, Template: "agent-{agent.id}"},
		"DSH_W": {Kind: KindWebhook, WebhookURL: "https://127.0.0.1:9/env/hook"},
	} {
		d := got[key]
		if d.Kind != want.Kind || d.Template != want.Template || d.WebhookURL != want.WebhookURL {
			t.Errorf("%s: kind %q template %q url %q, want %q %q %q",
				key, d.Kind, d.Template, d.WebhookURL, want.Kind, want.Template, want.WebhookURL)
		}
	}
}

func TestRedactURL(t *testing.T) {
	for raw, want := range map[string]string{
		"http://127.0.0.1:8080/hook":              "http://127.0.0.1:8080/hook",
		"https://u:p@127.0.0.1/a/b?x=1&token=2#f": "https://127.0.0.1/a/b",
		"https://token@127.0.0.1/?":               "https://127.0.0.1/",
		"http://127.0.0.1/p%2Fq?sig=abc":          "http://127.0.0.1/p%2Fq",
		"http://[::1]:9/x#secret":                 "http://[::1]:9/x",
		"://not a url":                            "",
	} {
		if got := RedactURL(raw); got != want {
			t.Errorf("RedactURL(%q) = %q, want %q", raw, got, want)
		}
	}
}
