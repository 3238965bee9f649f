package simcluster

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// The deployment guide and the harness run the same commands: the
// ExecStart line of each unit under deploy/ has the subcommand, the flags
// (in order) and the number of positional arguments of the command plan
// makes for that role; docs/deploy.md's start steps come in plan's order
// and its `atoll format` line has plan's flags; every variable a unit uses
// is set in some machine's environment file. A flag added to one side
// only, a renamed unit or a reordered step fails here.
func TestDeployUnitsMatch(t *testing.T) {
	root := filepath.Join("..", "..")
	unitKind := map[string]string{
		"atoll-manager.service": KindManager,
		"atoll-storage.service": KindStorage,
		"atoll-meta.service":    KindIsland,
		"atoll-nfs.service":     KindNFS,
		"atoll-mount.service":   KindMount,
	}
	cfg := Config{Dir: "/d", Storage: 3, Islands: 3, NFS: true, Mount: "/mnt/x", ManagerArgs: []string{"--down-after", "2s"}}
	steps := plan(cfg, func(h string) string { return "10.99.0.2" })
	planned := map[string]cmdShape{}
	for _, st := range steps {
		if _, ok := planned[st.kind]; !ok {
			planned[st.kind] = shapeOf(st.args)
		}
	}

	units, err := filepath.Glob(filepath.Join(root, "deploy", "*.service"))
	if err != nil || len(units) == 0 {
		t.Fatalf("no units under deploy/ (%v)", err)
	}
	seen := map[string]bool{}
	var vars []string
	for _, u := range units {
		base := filepath.Base(u)
		kind, ok := unitKind[base]
		if !ok {
			t.Errorf("deploy/%s: a unit simcluster does not know; add its role to plan and to this test", base)
			continue
		}
		seen[kind] = true
		b, err := os.ReadFile(u)
		if err != nil {
			t.Fatal(err)
		}
		text := string(b)
		vars = append(vars, regexp.MustCompile(`\$\{([A-Z0-9_]+)\}`).FindAllString(text, -1)...)
		var execs [][]string
		for _, l := range unitLines(text) {
			if v, ok := strings.CutPrefix(l, "ExecStart="); ok {
				execs = append(execs, strings.Fields(v))
			}
		}
		if len(execs) != 1 || len(execs[0]) < 2 || filepath.Base(strings.TrimLeft(execs[0][0], "-@:+!")) != "atoll" {
			t.Errorf("deploy/%s: want one ExecStart=.../atoll SUBCOMMAND ..., got %q", base, execs)
			continue
		}
		got, want := shapeOf(execs[0][1:]), planned[kind]
		if !got.equal(want) {
			t.Errorf("deploy/%s runs\n  %s\nbut simcluster runs the %s role as\n  %s", base, got, kind, want)
		}
	}
	for _, k := range []string{KindManager, KindStorage, KindIsland, KindNFS, KindMount} {
		if !seen[k] {
			t.Errorf("no unit under deploy/ runs the %s role", k)
		}
	}

	// Every ${VAR} a unit uses is set by a machine's environment file.
	envs, _ := filepath.Glob(filepath.Join(root, "deploy", "*.env"))
	set := map[string]bool{}
	for _, e := range envs {
		b, err := os.ReadFile(e)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range strings.Split(string(b), "\n") {
			if k, _, ok := strings.Cut(strings.TrimSpace(l), "="); ok && !strings.HasPrefix(k, "#") {
				set[k] = true
			}
		}
	}
	for _, v := range vars {
		if name := strings.Trim(v, "${}"); !set[name] {
			t.Errorf("a unit uses %s, which no deploy/*.env sets", v)
		}
	}

	// docs/deploy.md: the start steps in plan's order, and plan's format.
	b, err := os.ReadFile(filepath.Join(root, "docs", "deploy.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "<!-- simcluster: steps begin -->")
	section, _, ok2 := strings.Cut(section, "<!-- simcluster: steps end -->")
	if !ok || !ok2 {
		t.Fatal("docs/deploy.md: no <!-- simcluster: steps begin/end --> section")
	}
	var docOrder []string
	var docFormat []string
	enable := regexp.MustCompile(`^systemctl enable --now (\S+?)(\.service)?$`)
	for _, l := range strings.Split(section, "\n") {
		l = strings.TrimSpace(l)
		if m := enable.FindStringSubmatch(l); m != nil {
			k, ok := unitKind[m[1]+".service"]
			if !ok {
				t.Errorf("docs/deploy.md starts %s, which is not a unit under deploy/", m[1])
			}
			docOrder = appendNew(docOrder, k)
		} else if f := strings.Fields(l); len(f) > 1 && filepath.Base(f[0]) == "atoll" && f[1] == "format" {
			docOrder = appendNew(docOrder, kindFormat)
			docFormat = f[1:]
		}
	}
	var planOrder []string
	for _, st := range steps {
		planOrder = appendNew(planOrder, st.kind)
		if st.kind == kindFormat && !shapeOf(docFormat).equal(shapeOf(st.args)) {
			t.Errorf("docs/deploy.md formats with\n  %s\nbut simcluster runs\n  %s", shapeOf(docFormat), shapeOf(st.args))
		}
	}
	if !slices.Equal(docOrder, planOrder) {
		t.Errorf("docs/deploy.md starts the roles in the order %v; simcluster in %v", docOrder, planOrder)
	}
}

// appendNew appends k unless it is the last element (a step on several
// machines is one step).
func appendNew(s []string, k string) []string {
	if len(s) > 0 && s[len(s)-1] == k {
		return s
	}
	return append(s, k)
}

// unitLines joins a unit file's continuation lines (a trailing
// backslash) and drops comments and blank lines.
func unitLines(text string) []string {
	var out []string
	cur := ""
	for _, l := range strings.Split(text, "\n") {
		l = strings.TrimSpace(l)
		if cur == "" && (l == "" || strings.HasPrefix(l, "#") || strings.HasPrefix(l, ";")) {
			continue
		}
		if s, ok := strings.CutSuffix(l, "\\"); ok {
			cur += s + " "
			continue
		}
		out = append(out, cur+l)
		cur = ""
	}
	return out
}

// cmdShape is a command line without its values: the subcommand, the
// flags in order, the number of positional arguments.
type cmdShape struct {
	sub        string
	flags      []string
	positional int
}

// shapeOf reads SUBCOMMAND [--flag value | --flag=value | positional]...
// (every Atoll role flag takes a value).
func shapeOf(args []string) cmdShape {
	var s cmdShape
	if len(args) == 0 {
		return s
	}
	s.sub = args[0]
	for i := 1; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "--") {
			s.positional++
			continue
		}
		name, _, hasValue := strings.Cut(a, "=")
		s.flags = append(s.flags, name)
		if !hasValue {
			i++ // its value
		}
	}
	return s
}

func (s cmdShape) equal(o cmdShape) bool {
	return s.sub == o.sub && slices.Equal(s.flags, o.flags) && s.positional == o.positional
}

func (s cmdShape) String() string {
	return strings.TrimSpace("atoll " + s.sub + " " + strings.Join(s.flags, " ") + strings.Repeat(" ARG", s.positional))
}
