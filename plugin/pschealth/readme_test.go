package pschealth

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/coredns/caddy"
)

// Every `~~~ corefile` snippet of the README parses: its pschealth block with parse, against the
// checks its healthcheck block defines.
func TestReadmeCorefiles(t *testing.T) {
	b, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	snippets := corefileBlocks(string(b))
	if len(snippets) == 0 {
		t.Fatal("no ~~~ corefile snippet in README.md")
	}
	checkDef := regexp.MustCompile(`(?m)^\s*check\s+(\S+)\s*\{`)
	for i, s := range snippets {
		block := directiveBlock(s, pluginName)
		if block == "" {
			t.Errorf("snippet %d has no pschealth block", i)
			continue
		}
		defined := fakeChecks{}
		for _, m := range checkDef.FindAllStringSubmatch(directiveBlock(s, "healthcheck"), -1) {
			defined[m[1]] = true
		}
		if len(defined) == 0 {
			t.Errorf("snippet %d defines no healthcheck check", i)
		}
		if _, err := parse(caddy.NewTestController("dns", block), defined); err != nil {
			t.Errorf("snippet %d: %v\n%s", i, err, block)
		}
	}
}

func corefileBlocks(md string) []string {
	var out []string
	var cur []string
	in := false
	for l := range strings.SplitSeq(md, "\n") {
		switch {
		case !in && strings.TrimSpace(l) == "~~~ corefile":
			in, cur = true, cur[:0] // reused: Join copies the lines
		case in && strings.TrimSpace(l) == "~~~":
			in = false
			out = append(out, strings.Join(cur, "\n"))
		case in:
			cur = append(cur, l)
		}
	}
	return out
}

// directiveBlock returns "NAME { ... }" from s, braces matched, or "".
func directiveBlock(s, name string) string {
	re := regexp.MustCompile(`(?m)^\s*` + regexp.QuoteMeta(name) + `\b`)
	loc := re.FindStringIndex(s)
	if loc == nil {
		return ""
	}
	depth := 0
	for i := loc[0]; i < len(s); i++ {
		switch s[i] {
		case '{':
			depth++
		case '}':
			depth--
			if depth == 0 {
				return s[loc[0] : i+1]
			}
		}
	}
	return ""
}
