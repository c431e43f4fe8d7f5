package test

import (
	"io/fs"
	"path/filepath"
	"strings"
	"testing"

	"github.com/coredns/caddy"
	"github.com/coresteer/coresteer/plugin/pkg/chain"
	"github.com/coresteer/coresteer/plugin/pkg/readme"
)

type snippetInput string

func (s snippetInput) Body() []byte       { return []byte(s) }
func (s snippetInput) Path() string       { return "README" }
func (s snippetInput) ServerType() string { return "dns" }

// Every "~~~ corefile" snippet of every README in the tree is a Corefile this build accepts:
// server blocks, known directives in a valid chain. Each plugin's own tests also run its parser on
// the snippets of its README.
func TestReadmeSnippetsParse(t *testing.T) {
	chain.Install()
	n := 0
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "bin") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.EqualFold(d.Name(), "README.md") {
			return nil
		}
		snippets, err := readme.Snippets(path)
		if err != nil {
			return err
		}
		for _, s := range snippets {
			n++
			if err := caddy.ValidateAndExecuteDirectives(snippetInput(s.Text), nil, true); err != nil {
				t.Errorf("%s:%d: %v", path, s.Line, err)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		t.Fatal("no corefile snippet found: the walk is broken")
	}
}
