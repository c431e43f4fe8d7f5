package test

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/coredns/caddy"
	"github.com/coresteer/coresteer/plugin/pkg/chain"
	"github.com/coresteer/coresteer/plugin/pkg/readme"
)

func isDir(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.IsDir()
}

type snippetInput string

func (s snippetInput) Body() []byte       { return []byte(s) }
func (s snippetInput) Path() string       { return "README" }
func (s snippetInput) ServerType() string { return "dns" }

// Every "~~~ corefile" snippet of every README in the tree is a Corefile this build accepts:
// server blocks, known directives in a valid chain, every setup function passing. Files a snippet
// names (zone files, record-set exports) are looked up in the testdata folder beside the README.
// Each plugin's own tests also run its parser on the snippets of its README.
func TestReadmeSnippetsParse(t *testing.T) {
	chain.Install()
	n := 0
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "bin" || path == filepath.Join(root, "bench", "out")) {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.EqualFold(d.Name(), "README.md") {
			return nil
		}
		snippets, err := readme.Snippets(path)
		if err != nil {
			return err
		}
		if len(snippets) == 0 {
			return nil
		}
		rel, _ := filepath.Rel(root, path)
		t.Run(rel, func(t *testing.T) {
			if data := filepath.Join(filepath.Dir(path), "testdata"); isDir(data) {
				t.Chdir(data)
			}
			for _, s := range snippets {
				if err := caddy.ValidateAndExecuteDirectives(snippetInput(s.Text), nil, true); err != nil {
					t.Errorf("%s:%d: %v", rel, s.Line, err)
				}
			}
		})
		n += len(snippets)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		t.Fatal("no corefile snippet found: the walk is broken")
	}
}
