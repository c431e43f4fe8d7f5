package kubernetes_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// The image cannot be built on the development machine (no Docker engine). This test holds the
// Dockerfile to what the Deployment and README.md rely on, by reading it.

// instruction is one Dockerfile instruction with its continuation lines joined.
type instruction struct{ op, args string }

func readDockerfile(t *testing.T) []instruction {
	t.Helper()
	data, err := os.ReadFile("Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	var (
		out []instruction
		cur strings.Builder
	)
	for line := range strings.Lines(string(data)) {
		line = strings.TrimRight(line, "\r\n")
		trimmed := strings.TrimSpace(line)
		if cur.Len() == 0 && (trimmed == "" || strings.HasPrefix(trimmed, "#")) {
			continue
		}
		if cont, ok := strings.CutSuffix(line, "\\"); ok {
			cur.WriteString(cont + " ")
			continue
		}
		cur.WriteString(line)
		op, args, _ := strings.Cut(strings.TrimSpace(cur.String()), " ")
		out = append(out, instruction{strings.ToUpper(op), strings.TrimSpace(args)})
		cur.Reset()
	}
	return out
}

func TestDockerfile(t *testing.T) {
	ins := readDockerfile(t)
	args := map[string]string{} // ARG defaults, for FROM ${BASE}
	var stages [][]instruction
	for _, in := range ins {
		switch in.op {
		case "ARG":
			if k, v, ok := strings.Cut(in.args, "="); ok {
				args[k] = v
			}
		case "FROM":
			stages = append(stages, nil)
		}
		if len(stages) > 0 {
			stages[len(stages)-1] = append(stages[len(stages)-1], in)
		}
	}
	if len(stages) < 2 {
		t.Fatalf("%d stages, want a multi-stage build", len(stages))
	}
	expand := func(s string) string {
		return os.Expand(s, func(k string) string { return args[k] })
	}

	build := strings.Join(flatten(stages[:len(stages)-1]), "\n")
	for _, want := range []string{"CGO_ENABLED=0", "go build", "./cmd/coredns-slim", "setcap cap_net_bind_service=+ep"} {
		if !strings.Contains(build, want) {
			t.Errorf("the build stages do not contain %q", want)
		}
	}
	// The version the binary reports comes from -X on this variable.
	if m := regexp.MustCompile(`-X (\S+)\.Version=`).FindStringSubmatch(build); m == nil {
		t.Error("no -X ...Version= in the go build")
	} else if m[1] != "github.com/coresteer/coresteer/plugin/pkg/version" {
		t.Errorf("-X sets %s.Version, want github.com/coresteer/coresteer/plugin/pkg/version.Version", m[1])
	}

	final := stages[len(stages)-1]
	base := expand(strings.Fields(final[0].args)[0])
	if !strings.HasPrefix(base, "gcr.io/distroless/static") && base != "scratch" {
		t.Errorf("final stage FROM %s, want distroless/static or scratch", base)
	}
	var user, entrypoint string
	var copied bool
	for _, in := range final {
		switch in.op {
		case "USER":
			user = in.args
		case "ENTRYPOINT":
			entrypoint = in.args
		case "COPY":
			copied = copied || (strings.Contains(in.args, "--from=build") && strings.HasSuffix(in.args, " /coredns"))
		}
	}
	if !copied {
		t.Error("the final stage does not copy /coredns from the build stage")
	}
	if entrypoint != `["/coredns"]` {
		t.Errorf("ENTRYPOINT %s, want [\"/coredns\"] (the Deployment passes -conf as args)", entrypoint)
	}
	// Numeric, so the kubelet can check runAsNonRoot, and the same uid as the Deployment's.
	uid, _, _ := strings.Cut(user, ":")
	n, err := strconv.Atoi(uid)
	if err != nil || n == 0 {
		t.Fatalf("USER %q, want a numeric non-root uid", user)
	}
	if c := load(t); *c.deployment.Spec.Template.Spec.SecurityContext.RunAsUser != int64(n) {
		t.Errorf("image runs as %d, deployment as %d", n, *c.deployment.Spec.Template.Spec.SecurityContext.RunAsUser)
	}

	// What the build stage copies exists in the repository (the context is its root).
	root := filepath.Join("..", "..")
	for _, p := range []string{"go.mod", "go.sum", "cmd/coredns-slim/main.go", "cmd/coredns-slim/plugin.cfg", "cmd/internal/server/server.go", "plugin/pkg/version/version.go"} {
		if _, err := os.Stat(filepath.Join(root, p)); err != nil {
			t.Errorf("the build needs %s: %v", p, err)
		}
	}
}

func flatten(stages [][]instruction) []string {
	out := make([]string, 0, len(stages)*8)
	for _, s := range stages {
		for _, in := range s {
			out = append(out, in.op+" "+in.args)
		}
	}
	return out
}

// The context's ignore file keeps what the build needs.
func TestDockerignoreKeepsSources(t *testing.T) {
	data, err := os.ReadFile("Dockerfile.dockerignore")
	if err != nil {
		t.Fatal(err)
	}
	keep := map[string]bool{}
	for line := range strings.Lines(string(data)) {
		if p, ok := strings.CutPrefix(strings.TrimSpace(line), "!"); ok {
			keep[strings.TrimSuffix(p, "/")] = true
		}
	}
	for _, p := range []string{"go.mod", "go.sum", "cmd", "plugin"} {
		if !keep[p] {
			t.Errorf("Dockerfile.dockerignore does not re-include %s", p)
		}
	}
}
