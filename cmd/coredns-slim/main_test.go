package main

import (
	"bufio"
	"go/parser"
	"go/token"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/coredns/caddy"
	"github.com/coredns/caddy/caddyfile"
	"github.com/coredns/coredns/core/dnsserver"

	"github.com/coresteer/coresteer/plugin/pkg/chain"
)

// cfg returns plugin.cfg's directives and the package path of each (CoreDNS's short form
// "cache" is github.com/coredns/coredns/plugin/cache).
func cfg(t *testing.T) (directives, packages []string) {
	t.Helper()
	f, err := os.Open("plugin.cfg")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		dir, pkg, ok := strings.Cut(line, ":")
		if !ok {
			t.Fatalf("plugin.cfg: %q is not directive:package", line)
		}
		if !strings.Contains(pkg, "/") {
			pkg = "github.com/coredns/coredns/plugin/" + pkg
		}
		directives, packages = append(directives, dir), append(packages, pkg)
	}
	return directives, packages
}

// main.go and cmd/internal/server (our plugins, shared by both builds) import exactly the plugins
// plugin.cfg lists, so the file an operator copies from is the build we test.
func TestImportsArePluginCfg(t *testing.T) {
	_, want := cfg(t)
	var got []string
	for _, file := range []string{"main.go", "../internal/server/server.go"} {
		f, err := parser.ParseFile(token.NewFileSet(), file, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			if imp.Name != nil && imp.Name.Name == "_" {
				got = append(got, p)
			}
		}
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("main.go imports %v\nplugin.cfg lists %v", got, want)
	}
}

// The plugins of plugin.cfg are registered, ours included, and no in-tree plugin the slim build
// leaves out is (the point of the build).
func TestRegistered(t *testing.T) {
	listed := strings.Fields(caddy.DescribePlugins())
	dirs, _ := cfg(t)
	for _, d := range dirs {
		if !slices.Contains(listed, d) {
			t.Errorf("plugin.cfg lists %s, -plugins does not", d)
		}
	}
	for _, gone := range []string{"route53", "azure", "clouddns", "etcd", "grpc", "trace"} {
		if slices.Contains(listed, gone) {
			t.Errorf("%s is registered in the slim build", gone)
		}
	}
}

// Every Corefile we ship (the example and the Kubernetes ConfigMap's) uses only directives the
// slim build has, so it runs either of them.
func TestShippedCorefilesUseSlimDirectives(t *testing.T) {
	listed := strings.Fields(caddy.DescribePlugins())
	all, err := chain.Order(dnsserver.Directives)
	if err != nil {
		t.Fatal(err)
	}
	var have []string
	for _, d := range all {
		if slices.Contains(listed, d) {
			have = append(have, d)
		}
	}
	example, err := os.ReadFile("../../Corefile.example")
	if err != nil {
		t.Fatal(err)
	}
	configmap, err := os.ReadFile("../../deploy/kubernetes/configmap.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for name, corefile := range map[string]string{
		"Corefile.example":                 string(example),
		"deploy/kubernetes/configmap.yaml": yamlBlock(t, string(configmap), "Corefile: |"),
	} {
		if _, err := caddyfile.Parse(name, strings.NewReader(corefile), have); err != nil {
			t.Errorf("%s does not parse with the slim build's directives: %v", name, err)
		}
	}
}

// yamlBlock returns the literal block scalar that follows the line ending in key.
func yamlBlock(t *testing.T, doc, key string) string {
	t.Helper()
	lines := strings.Split(doc, "\n")
	for i, l := range lines {
		if !strings.HasSuffix(strings.TrimSpace(l), key) {
			continue
		}
		indent := len(l) - len(strings.TrimLeft(l, " ")) + 2
		var b strings.Builder
		for _, body := range lines[i+1:] {
			if strings.TrimSpace(body) != "" && len(body)-len(strings.TrimLeft(body, " ")) < indent {
				break
			}
			b.WriteString(strings.TrimPrefix(body, strings.Repeat(" ", indent)) + "\n")
		}
		return b.String()
	}
	t.Fatalf("no %q in the document", key)
	return ""
}
