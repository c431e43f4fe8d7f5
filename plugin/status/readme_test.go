package status

import (
	"strings"
	"testing"

	"github.com/coredns/caddy"
	"github.com/coresteer/coresteer/plugin/pkg/readme"
)

// Every `~~~ corefile` snippet of the README has a status line that parse accepts (the whole
// snippets are run by test/readme_test.go).
func TestReadmeCorefiles(t *testing.T) {
	snippets, err := readme.Snippets("README.md")
	if err != nil {
		t.Fatal(err)
	}
	if len(snippets) == 0 {
		t.Fatal("no ~~~ corefile snippet in README.md")
	}
	for _, s := range snippets {
		var line string
		for l := range strings.SplitSeq(s.Text, "\n") {
			if f := strings.Fields(l); len(f) > 0 && f[0] == "status" {
				line = strings.TrimSpace(l)
			}
		}
		if line == "" {
			t.Errorf("README.md:%d: no status line", s.Line)
			continue
		}
		if _, err := parse(caddy.NewTestController("dns", line)); err != nil {
			t.Errorf("README.md:%d: %v", s.Line, err)
		}
	}
}
