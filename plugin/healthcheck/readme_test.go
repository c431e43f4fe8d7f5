package healthcheck

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/coredns/caddy"
)

var snippet = regexp.MustCompile("(?s)~~~ corefile\n(.*?)~~~")

// Every `~~~ corefile` snippet of the README parses.
func TestReadmeSnippets(t *testing.T) {
	b, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	ms := snippet.FindAllStringSubmatch(string(b), -1)
	if len(ms) == 0 {
		t.Fatal("no corefile snippet in README.md")
	}
	for i, m := range ms {
		block := directiveBlock(m[1], "healthcheck")
		if block == "" {
			t.Errorf("snippet %d has no healthcheck block", i)
			continue
		}
		if _, err := parse(caddy.NewTestController("dns", block)); err != nil {
			t.Errorf("snippet %d: %v\n%s", i, err, block)
		}
	}
}

// directiveBlock returns `name { ... }` out of a Corefile, matching braces.
func directiveBlock(corefile, name string) string {
	i := strings.Index(corefile, name+" {")
	if i < 0 {
		return ""
	}
	depth := 0
	for j := i; j < len(corefile); j++ {
		switch corefile[j] {
		case '{':
			depth++
		case '}':
			depth--
			if depth == 0 {
				return corefile[i : j+1]
			}
		}
	}
	return ""
}

// The healthcheck block of the repository's Corefile.example parses.
func TestCorefileExample(t *testing.T) {
	b, err := os.ReadFile("../../Corefile.example")
	if err != nil {
		t.Skip("no Corefile.example")
	}
	block := directiveBlock(string(b), "healthcheck")
	if block == "" {
		t.Skip("Corefile.example has no healthcheck block")
	}
	if _, err := parse(caddy.NewTestController("dns", block)); err != nil {
		t.Fatalf("Corefile.example: %v", err)
	}
}
